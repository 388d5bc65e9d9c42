#include <zarrcoro/store/http.hpp>

#include <algorithm>
#include <cctype>

#include <boost/algorithm/string/predicate.hpp>

#include <zarrcoro/error.hpp>

#include "store/http_client.hpp"
#include "store/sigv4.hpp"  // uri_encode

namespace zarrcoro {

namespace bh = boost::beast::http;


HttpStore::HttpStore(boost::asio::any_io_executor io, std::string base_url, HttpStoreOptions options)
    : options_(std::move(options)) {
  auto [origin, path] = http::parse_url(base_url);
  origin_ = std::make_unique<http::Origin>(origin);
  base_ = origin.str();
  path_ = path;
  url_ = std::string(origin.tls ? "https://" : "http://") + origin.authority() + path_;
  client_ = std::make_shared<http::Client>(std::move(io), options_.http);
}

HttpStore::~HttpStore() = default;

std::string HttpStore::url() const { return url_; }
boost::asio::any_io_executor HttpStore::get_executor() const { return client_->executor(); }

HttpClientStats HttpStore::stats() const { return client_->stats(); }

std::string HttpStore::target(const std::string& key) const {
  return path_ + "/" + sigv4::uri_encode(key, false);
}

namespace {

bool is_redirect(unsigned s) { return s == 301 || s == 302 || s == 303 || s == 307 || s == 308; }

// Points `req` at `location` (absolute, scheme-relative, or relative to the
// request's target). Another origin does not get `own` (the store's
// configured headers: credentials for this server only), and an https
// store is never led to plain http. StoreError for such a redirect.
void redirect(http::Request& req, const std::string& location,
              const std::vector<std::pair<std::string, std::string>>& own) {
  const bool absolute = boost::algorithm::istarts_with(location, "http://") ||
                        boost::algorithm::istarts_with(location, "https://");
  if (absolute || location.starts_with("//")) {
    std::string url = absolute ? location : (req.origin.tls ? "https:" : "http:") + location;
    const std::size_t scheme_end = url.find("://") + 3;
    for (std::size_t i = 0; i < scheme_end; ++i) url[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(url[i])));
    const std::size_t path = url.find_first_of("/?", scheme_end);
    http::Origin to;
    try {
      to = http::parse_url(url.substr(0, path)).first;
    } catch (const InvalidArgument& e) {
      throw StoreError(req.key, "Location", req.origin.str() + req.target + ": a redirect to " + location + ": " + e.what());
    }
    if (req.origin.tls && !to.tls)
      throw StoreError(req.key, "Location", req.origin.str() + req.target + ": a redirect from https to " + location);
    if (to != req.origin)
      std::erase_if(req.headers, [&](const auto& h) {
        return std::any_of(own.begin(), own.end(),
                           [&](const auto& o) { return boost::algorithm::iequals(o.first, h.first); });
      });
    req.origin = to;
    req.target = path == std::string::npos ? "/" : url[path] == '?' ? "/" + url.substr(path) : url.substr(path);
  } else if (location.starts_with("/")) {
    req.target = location;
  } else {
    const std::string dir = req.target.substr(0, req.target.find('?'));
    req.target = dir.substr(0, dir.rfind('/') + 1) + location;
  }
}

}  // namespace

awaitable<http::Response> HttpStore::fetch(http::Request req) {
  constexpr int max_redirects = 5;
  for (int hops = 0;; ++hops) {
    http::Request again = req;
    http::Response r = co_await client_->send(std::move(again));
    const std::string location = r.header("Location");
    if (!is_redirect(r.status) || location.empty()) co_return r;
    if (hops == max_redirects)
      throw StoreError(req.key, "HTTP " + std::to_string(r.status),
                       url_ + ": more than " + std::to_string(max_redirects) + " redirects");
    redirect(req, location, options_.headers);
  }
}

awaitable<ReadResult> HttpStore::read(std::string key, ReadOptions options) {
  validate_key(key);
  const ByteRange range = options.range;
  const bool empty_range = range.empty();
  const Generation& if_equal = options.if_equal;
  http::Request req;
  req.method = empty_range ? bh::verb::head : bh::verb::get;
  req.origin = *origin_;
  req.target = target(key);
  req.key = key;
  req.headers = options_.headers;
  if (!if_equal.unknown() && !if_equal.is_absent()) req.headers.emplace_back("If-Match", if_equal.token);
  const std::string range_value = empty_range ? "" : http::range_header(range);
  if (!range_value.empty()) {
    req.headers.emplace_back("Range", range_value);
    req.max_full_body = options_.max_full_body;
  }
  const char* method = empty_range ? "HEAD " : "GET ";
  http::Response r = co_await fetch(std::move(req));
  const std::string url = base_ + target(key);
  ReadResult result;
  if (r.status == 412 && !if_equal.unknown() && !if_equal.is_absent()) {  // If-Match failed: another version (or none)
    result.changed = true;
    co_return result;
  }
  if (r.status == 404 || r.status == 410) {
    result.generation = Generation::absent();
  } else if (empty_range && r.status >= 200 && r.status < 300) {
    result.generation = http::etag_generation(r);
    result.value = Bytes{};
  } else if (auto value = empty_range ? std::nullopt : http::take_value(key, url, range, r)) {
    result.generation = http::etag_generation(r);
    result.value = std::move(value);
  } else {
    throw StoreError(key, "HTTP " + std::to_string(r.status),
                     method + url + ": " + std::to_string(r.status) + " " + std::string(http::status_text(r.status)) +
                         (r.attempts > 1 ? " after " + std::to_string(r.attempts) + " attempts" : ""));
  }
  // A server that ignored If-Match (or a condition on absence) is caught here.
  if (!if_equal.unknown() && result.generation != if_equal) {
    result.value.reset();
    result.changed = true;
  }
  co_return result;
}

awaitable<std::optional<Generation>> HttpStore::write(std::string key, std::optional<Bytes> value, WriteOptions) {
  validate_key(key);
  throw StoreError(key, "read_only",
                   url() + " is a read-only HTTP store: values cannot be " + (value ? "written" : "erased"));
  co_return std::nullopt;
}

awaitable<std::vector<std::string>> HttpStore::list(std::string prefix) {
  throw StoreError(prefix, "list", url() + ": an HTTP store cannot list keys");
  co_return std::vector<std::string>{};
}

}  // namespace zarrcoro
