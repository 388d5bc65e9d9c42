#include <zarrcoro/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

namespace zarrcoro {

const char* to_string(Errc code) noexcept {
  switch (code) {
    case Errc::invalid_metadata: return "invalid metadata";
    case Errc::unsupported: return "unsupported";
    case Errc::corrupt_chunk: return "corrupt chunk";
    case Errc::store_io: return "store I/O error";
    case Errc::not_found: return "not found";
    case Errc::cancelled: return "cancelled";
    case Errc::invalid_argument: return "invalid argument";
    case Errc::already_exists: return "already exists";
  }
  return "error";
}

namespace {
std::string format(Errc code, const std::string& key, const std::string& field,
                   const std::string& message) {
  std::string s = to_string(code);
  if (!key.empty()) s += ": key '" + key + "'";
  if (!field.empty()) s += (key.empty() ? ": field '" : ", field '") + field + "'";
  return s + ": " + message;
}
}  // namespace

Error::Error(Errc code, std::string key, std::string field, const std::string& message)
    : std::runtime_error(format(code, key, field, message)),
      code_(code),
      key_(std::move(key)),
      field_(std::move(field)),
      detail_(message) {}

void throw_error(Errc code, std::string key, std::string field, const std::string& message) {
  switch (code) {
    case Errc::invalid_metadata: throw InvalidMetadata(std::move(key), std::move(field), message);
    case Errc::unsupported: throw UnsupportedError(std::move(key), std::move(field), message);
    case Errc::corrupt_chunk: throw CorruptChunk(std::move(key), std::move(field), message);
    case Errc::store_io: throw StoreError(std::move(key), std::move(field), message);
    case Errc::not_found: throw NotFound(std::move(key), std::move(field), message);
    case Errc::cancelled: throw Cancelled(std::move(key), std::move(field), message);
    case Errc::already_exists: throw AlreadyExists(std::move(key), std::move(field), message);
    case Errc::invalid_argument: break;
  }
  throw InvalidArgument(std::move(key), std::move(field), message);
}

namespace {
// Values are Errc + 1: an error_code of value 0 means success.
class Category final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "zarrcoro"; }
  std::string message(int v) const override { return to_string(static_cast<Errc>(v - 1)); }
};
}  // namespace

const boost::system::error_category& error_category() noexcept {
  static const Category category;
  return category;
}

boost::system::error_code make_error_code(Errc code) noexcept {
  return {static_cast<int>(code) + 1, error_category()};
}

boost::system::error_code to_error_code(const std::exception_ptr& e) noexcept {
  if (!e) return {};
  try {
    std::rethrow_exception(e);
  } catch (const Cancelled&) {
    return boost::asio::error::operation_aborted;
  } catch (const Error& err) {
    return make_error_code(err.code());
  } catch (const boost::system::system_error& err) {
    return err.code();
  } catch (...) {
    return make_error_code(boost::system::errc::io_error);
  }
}

}  // namespace zarrcoro
