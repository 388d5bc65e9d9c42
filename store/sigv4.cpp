#include "store/sigv4.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <ctime>
#include <stdexcept>

namespace zarrcoro::sigv4 {

namespace {

bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return out;
}

// Trims surrounding whitespace and collapses inner runs of spaces to one.
std::string trim_collapse(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::span<const unsigned char> as_uchars(std::string_view s) {
  return {reinterpret_cast<const unsigned char*>(s.data()), s.size()};
}

}  // namespace

std::string hex(std::span<const unsigned char> data) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(data.size() * 2, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) {
    out[2 * i] = digits[data[i] >> 4];
    out[2 * i + 1] = digits[data[i] & 15];
  }
  return out;
}

Digest sha256(ByteSpan data) {
  Digest d{};
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), d.data(), &n, EVP_sha256(), nullptr) != 1 || n != d.size())
    throw std::runtime_error("sigv4: SHA-256 failed (OpenSSL)");
  return d;
}

std::string sha256_hex(ByteSpan data) { return hex(sha256(data)); }

std::string sha256_hex(std::string_view data) {
  return sha256_hex(ByteSpan(reinterpret_cast<const std::byte*>(data.data()), data.size()));
}

Digest hmac_sha256(std::span<const unsigned char> key, std::string_view data) {
  Digest d{};
  unsigned int n = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), d.data(), &n) ||
      n != d.size())
    throw std::runtime_error("sigv4: HMAC-SHA256 failed (OpenSSL)");
  return d;
}

std::array<unsigned char, 16> md5(ByteSpan data) {
  std::array<unsigned char, 16> d{};
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), d.data(), &n, EVP_md5(), nullptr) != 1 || n != 16)
    throw std::runtime_error("sigv4: MD5 failed (OpenSSL)");
  return d;
}

std::string md5_base64(ByteSpan data) {
  const auto d = md5(data);
  unsigned char out[32] = {};
  const int len = EVP_EncodeBlock(out, d.data(), 16);
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(len));
}

std::string uri_encode(std::string_view s, bool encode_slash) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (unreserved(c) || (c == '/' && !encode_slash)) {
      out += ch;
    } else {
      out += '%';
      out += digits[c >> 4];
      out += digits[c & 15];
    }
  }
  return out;
}

std::string uri_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += char(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::string normalize_path(std::string_view path) {
  std::vector<std::string_view> segments;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const auto seg = path.substr(start, end - start);
    if (seg == "..") {
      if (!segments.empty()) segments.pop_back();
    } else if (!seg.empty() && seg != ".") {
      segments.push_back(seg);
    }
    start = end + 1;
  }
  std::string out;
  for (auto seg : segments) {
    out += '/';
    out += seg;
  }
  // A trailing slash (or a trailing "." / ".." segment) names a directory.
  const bool dir = !path.empty() && (path.back() == '/' || path.ends_with("/.") ||
                                     path.ends_with("/.."));
  if (out.empty() || dir) out += '/';
  return out;
}

std::string amz_date(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string canonical_query(const Pairs& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [k, v] : query) encoded.emplace_back(uri_encode(k, true), uri_encode(v, true));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [k, v] : encoded) {
    if (!out.empty()) out += '&';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

std::pair<std::string, std::string> canonical_headers(const Pairs& headers) {
  // Stable sort by lower-case name keeps repeated headers in order of appearance.
  std::vector<std::pair<std::string, std::string>> h;
  h.reserve(headers.size());
  for (const auto& [k, v] : headers) h.emplace_back(lower(k), trim_collapse(v));
  std::stable_sort(h.begin(), h.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string lines, names;
  for (std::size_t i = 0; i < h.size(); ++i) {
    if (i > 0 && h[i].first == h[i - 1].first) {
      lines.back() = ',';  // replaces the '\n' of the previous line
      lines += h[i].second;
      lines += '\n';
      continue;
    }
    lines += h[i].first;
    lines += ':';
    lines += h[i].second;
    lines += '\n';
    if (!names.empty()) names += ';';
    names += h[i].first;
  }
  return {lines, names};
}

std::string canonical_request(const Request& r) {
  const auto [lines, names] = canonical_headers(r.headers);
  std::string out;
  out.reserve(256 + lines.size());
  out += r.method;
  out += '\n';
  out += r.canonical_uri.empty() ? "/" : r.canonical_uri;
  out += '\n';
  out += canonical_query(r.query);
  out += '\n';
  out += lines;
  out += '\n';
  out += names;
  out += '\n';
  out += r.payload_hash;
  return out;
}

std::string scope(std::string_view amz_date, std::string_view region, std::string_view service) {
  std::string out(amz_date.substr(0, 8));
  out += '/';
  out += region;
  out += '/';
  out += service;
  out += "/aws4_request";
  return out;
}

std::string string_to_sign(std::string_view amz_date, std::string_view region,
                           std::string_view service, std::string_view canonical_request) {
  std::string out(kAlgorithm);
  out += '\n';
  out += amz_date;
  out += '\n';
  out += scope(amz_date, region, service);
  out += '\n';
  out += sha256_hex(canonical_request);
  return out;
}

Digest signing_key(std::string_view secret_key, std::string_view date, std::string_view region,
                   std::string_view service) {
  const std::string k = "AWS4" + std::string(secret_key);
  Digest key = hmac_sha256(as_uchars(k), date);
  key = hmac_sha256(key, region);
  key = hmac_sha256(key, service);
  return hmac_sha256(key, "aws4_request");
}

std::string signature(const Request& request, std::string_view secret_key,
                      std::string_view amz_date, std::string_view region,
                      std::string_view service) {
  const Digest key = signing_key(secret_key, amz_date.substr(0, 8), region, service);
  return hex(hmac_sha256(key, string_to_sign(amz_date, region, service, canonical_request(request))));
}

std::string authorization(const Request& request, const Credentials& credentials,
                          std::string_view amz_date, std::string_view region,
                          std::string_view service) {
  std::string out(kAlgorithm);
  out += " Credential=";
  out += credentials.access_key;
  out += '/';
  out += scope(amz_date, region, service);
  out += ", SignedHeaders=";
  out += canonical_headers(request.headers).second;
  out += ", Signature=";
  out += signature(request, credentials.secret_key, amz_date, region, service);
  return out;
}

std::string sign(Request& request, const Credentials& credentials, std::string_view amz_date,
                 std::string_view region, std::string_view service) {
  request.headers.emplace_back("x-amz-date", std::string(amz_date));
  if (service == "s3") request.headers.emplace_back("x-amz-content-sha256", request.payload_hash);
  if (!credentials.session_token.empty())
    request.headers.emplace_back("x-amz-security-token", credentials.session_token);
  std::string auth = authorization(request, credentials, amz_date, region, service);
  request.headers.emplace_back("Authorization", auth);
  return auth;
}

}  // namespace zarrcoro::sigv4
