// AWS Signature Version 4 (header authorization), as pure functions.
//
// Thread-safety: every function is pure (no state, no I/O) and may be called
// from any thread.
//
// The signing chain (AWS "Create a signed AWS API request"):
//   canonical request  = method \n canonical URI \n canonical query \n
//                        canonical headers \n signed headers \n payload hash
//   string to sign     = "AWS4-HMAC-SHA256" \n amz date \n scope \n hex(sha256(canonical request))
//   signing key        = HMAC chain over "AWS4"+secret, date, region, service, "aws4_request"
//   signature          = hex(HMAC(signing key, string to sign))
// S3 specifics (handled by the caller through the inputs): the canonical URI
// is the path exactly as sent, each segment URI-encoded once, never
// normalized; the payload hash is hex(sha256(body)) or "UNSIGNED-PAYLOAD" and
// is also sent as x-amz-content-sha256. Other services normalize the path
// (remove "." and ".." segments and duplicate slashes): see normalize_path.
//
// Errors: none; inputs are taken as given (an empty secret signs with "AWS4").
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <zarrcoro/bytes.hpp>

namespace zarrcoro::sigv4 {

using Pairs = std::vector<std::pair<std::string, std::string>>;
using Digest = std::array<unsigned char, 32>;

struct Credentials {
  std::string access_key, secret_key;
  std::string session_token;  // optional; sent (and signed) as x-amz-security-token
};

// The parts of a request that are signed.
struct Request {
  std::string method;         // "GET", "PUT", ...
  std::string canonical_uri;  // the encoded path as sent, e.g. "/bucket/a%20b/c"
  Pairs query;                // decoded names and values, any order
  Pairs headers;              // names in any case, values as sent; all of them are signed
  std::string payload_hash;   // hex sha256 of the body, or "UNSIGNED-PAYLOAD"
};

inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";

// Lower-case hex of `data`.
std::string hex(std::span<const unsigned char> data);
Digest sha256(ByteSpan data);
std::string sha256_hex(ByteSpan data);
std::string sha256_hex(std::string_view data);
Digest hmac_sha256(std::span<const unsigned char> key, std::string_view data);
// MD5 of `data`, and its base64 (the Content-MD5 header value).
std::array<unsigned char, 16> md5(ByteSpan data);
std::string md5_base64(ByteSpan data);

// Percent-encodes every byte except the unreserved A-Z a-z 0-9 - _ . ~ (and
// '/' unless `encode_slash`), with upper-case hex digits.
std::string uri_encode(std::string_view s, bool encode_slash);
// Decodes %XX escapes (invalid escapes are kept as they are).
std::string uri_decode(std::string_view s);
// RFC 3986 path normalization for non-S3 services: collapses duplicate
// slashes, removes "." segments and resolves ".." segments. Keeps a
// trailing slash; the result always starts with '/'.
std::string normalize_path(std::string_view path);

// "20130524T000000Z" for `t` (UTC).
std::string amz_date(std::chrono::system_clock::time_point t);

// The canonical query string: names and values URI-encoded (slashes too),
// sorted by name, then value, joined with '&'.
std::string canonical_query(const Pairs& query);
// Canonical header lines (lower-case names, sorted; values trimmed with
// inner runs of spaces collapsed; repeated names joined by ',' in order of
// appearance), each ending in '\n'; and the signed-headers list "a;b;c".
std::pair<std::string, std::string> canonical_headers(const Pairs& headers);
std::string canonical_request(const Request& request);
// "20130524/us-east-1/s3/aws4_request" for amz date "20130524T000000Z".
std::string scope(std::string_view amz_date, std::string_view region, std::string_view service);
std::string string_to_sign(std::string_view amz_date, std::string_view region,
                           std::string_view service, std::string_view canonical_request);
// `date` is "YYYYMMDD".
Digest signing_key(std::string_view secret_key, std::string_view date, std::string_view region,
                   std::string_view service);
// Hex signature of `request` at `amz_date`.
std::string signature(const Request& request, std::string_view secret_key,
                      std::string_view amz_date, std::string_view region,
                      std::string_view service);
// The Authorization header value.
std::string authorization(const Request& request, const Credentials& credentials,
                          std::string_view amz_date, std::string_view region,
                          std::string_view service);

// Adds x-amz-date, x-amz-content-sha256 (when `service` is "s3"),
// x-amz-security-token (when the credentials carry one) and Authorization
// to `request.headers` (which must already hold Host and every header to be
// signed); returns the Authorization value.
std::string sign(Request& request, const Credentials& credentials, std::string_view amz_date,
                 std::string_view region, std::string_view service);

}  // namespace zarrcoro::sigv4
