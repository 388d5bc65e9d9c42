// Opening a store from a URL or a path: the one place that maps the text a
// user types (CLI arguments, benchmark options) to a Store.
//
// Thread-safety: open_store is reentrant; it reads the environment (for S3
// defaults) and makes no request. The returned store follows its own
// thread-safety contract.
//
//   /data/a.zarr, a.zarr, ./a.zarr   FilesystemStore (relative to the cwd)
//   file:///data/a.zarr              FilesystemStore (%XX escapes decoded)
//   http://host[:port]/path          HttpStore (read-only)
//   https://host[:port]/path         HttpStore (read-only, TLS verified)
//   s3://bucket[/prefix]             S3Store; endpoint, region and
//                                    credentials from OpenOptions::s3 or the
//                                    AWS_* environment variables
//   memory://                        a new, empty MemoryStore
// Anything else of the form "scheme://..." raises InvalidArgument naming the
// scheme; so do malformed URLs and missing S3 credentials.
#pragma once

#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>

#include <zarrcoro/store.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/http.hpp>
#include <zarrcoro/store/s3.hpp>

namespace zarrcoro {

struct OpenOptions {
  FilesystemOptions filesystem;
  HttpStoreOptions http;
  S3Options s3;  // bucket and prefix are taken from the URL
};

// `io` is the runtime's I/O executor.
std::shared_ptr<Store> open_store(const std::string& url, boost::asio::any_io_executor io,
                                  const OpenOptions& options = {});

// True if `text` has the form "scheme://..." (a URL rather than a path).
bool is_url(const std::string& text);

}  // namespace zarrcoro
