#include <zarrcoro/store/open.hpp>

#include <cctype>

#include <zarrcoro/error.hpp>
#include <zarrcoro/store/memory.hpp>

#include "store/sigv4.hpp"  // uri_decode

namespace zarrcoro {

namespace {

// The scheme of "scheme://...", lower-cased, or "" for a plain path.
std::string scheme_of(const std::string& text) {
  const std::size_t sep = text.find("://");
  if (sep == std::string::npos || sep == 0) return "";
  std::string scheme = text.substr(0, sep);
  if (!std::isalpha(static_cast<unsigned char>(scheme[0]))) return "";
  for (auto& c : scheme) {
    const auto u = static_cast<unsigned char>(c);
    if (!std::isalnum(u) && c != '+' && c != '-' && c != '.') return "";
    c = static_cast<char>(std::tolower(u));
  }
  return scheme;
}

}  // namespace

bool is_url(const std::string& text) { return !scheme_of(text).empty(); }

std::shared_ptr<Store> open_store(const std::string& url, boost::asio::any_io_executor io,
                                  const OpenOptions& options) {
  const std::string scheme = scheme_of(url);
  if (scheme.empty()) {
    if (url.empty()) throw InvalidArgument("", "url", "an empty store path");
    return std::make_shared<FilesystemStore>(std::move(io), url, options.filesystem);
  }
  const std::string rest = url.substr(scheme.size() + 3);
  if (scheme == "file") {
    // file:///abs/path or file://localhost/abs/path
    std::string path = rest;
    if (path.starts_with("localhost/")) path = path.substr(9);
    if (!path.starts_with("/"))
      throw InvalidArgument("", "url", "'" + url + "': expected file:///absolute/path");
    return std::make_shared<FilesystemStore>(std::move(io), sigv4::uri_decode(path), options.filesystem);
  }
  if (scheme == "http" || scheme == "https")
    return std::make_shared<HttpStore>(std::move(io), scheme + "://" + rest, options.http);
  if (scheme == "s3")
    return std::make_shared<S3Store>(std::move(io), S3Options::from_url("s3://" + rest, options.s3));
  if (scheme == "memory") return std::make_shared<MemoryStore>();
  throw InvalidArgument("", "url",
                        "'" + url + "': unsupported store scheme '" + scheme +
                            "' (expected a path, file://, http://, https://, s3:// or memory://)");
}

}  // namespace zarrcoro
