// zarrcoro error family.
//
// Thread-safety: error objects are immutable values; safe to copy across threads.
//
// Every error raised by the public API derives from zarrcoro::Error and names
// the store key (if any) and the metadata field or codec (if any) involved, so
// a message such as
//   "invalid metadata: key 'a/zarr.json', field 'fill_value': expected a JSON boolean"
// tells the user exactly where to look.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <boost/system/error_code.hpp>

namespace zarrcoro {

enum class Errc {
  invalid_metadata,  // zarr.json / .zarray is malformed or violates the spec
  unsupported,       // a valid but unsupported codec, data type or extension
  corrupt_chunk,     // a stored chunk cannot be decoded (checksum, size, framing)
  store_io,          // the store failed (OS error, network error)
  not_found,         // metadata document missing where one is required
  cancelled,         // the operation was cancelled
  invalid_argument,  // caller error: region out of bounds, buffer size, bad key
  already_exists,    // create: a node exists where one is to be created
};

const char* to_string(Errc code) noexcept;

class Error : public std::runtime_error {
 public:
  // `key` is the store key involved (may be empty); `field` is the metadata
  // field, codec name or parameter involved (may be empty).
  Error(Errc code, std::string key, std::string field, const std::string& message);

  Errc code() const noexcept { return code_; }
  const std::string& key() const noexcept { return key_; }
  const std::string& field() const noexcept { return field_; }
  // The message without the "kind: key ..., field ...:" prefix.
  const std::string& detail() const noexcept { return detail_; }

 private:
  Errc code_;
  std::string key_, field_, detail_;
};

#define ZARRCORO_ERROR_KIND(Name, Code)                                    \
  class Name : public Error {                                              \
   public:                                                                 \
    Name(std::string key, std::string field, const std::string& message)  \
        : Error(Errc::Code, std::move(key), std::move(field), message) {}  \
  };

ZARRCORO_ERROR_KIND(InvalidMetadata, invalid_metadata)
ZARRCORO_ERROR_KIND(UnsupportedError, unsupported)
ZARRCORO_ERROR_KIND(CorruptChunk, corrupt_chunk)
ZARRCORO_ERROR_KIND(StoreError, store_io)
ZARRCORO_ERROR_KIND(NotFound, not_found)
ZARRCORO_ERROR_KIND(Cancelled, cancelled)
ZARRCORO_ERROR_KIND(InvalidArgument, invalid_argument)
ZARRCORO_ERROR_KIND(AlreadyExists, already_exists)
#undef ZARRCORO_ERROR_KIND

// Throws the Error subclass that matches `code` (e.g. to re-raise an error
// with the key filled in, keeping its type).
[[noreturn]] void throw_error(Errc code, std::string key, std::string field,
                              const std::string& message);

// Error codes, for completion handlers that want them. The completion-token
// operations (array.hpp, store.hpp) complete with a std::exception_ptr
// holding the typed Error (with key and field); to_error_code turns it into
// a code:
//  - null: success (a default error_code);
//  - a zarrcoro::Error: make_error_code(its Errc), except Cancelled, which is
//    boost::asio::error::operation_aborted like any cancelled Asio operation;
//  - a boost::system::system_error (a failed or cancelled Asio operation): its code;
//  - anything else: boost::system::errc::io_error's generic code.
// The category's name is "zarrcoro"; its messages are to_string(Errc).
const boost::system::error_category& error_category() noexcept;
boost::system::error_code make_error_code(Errc code) noexcept;
boost::system::error_code to_error_code(const std::exception_ptr& e) noexcept;

}  // namespace zarrcoro

template <>
struct boost::system::is_error_code_enum<zarrcoro::Errc> : std::true_type {};
