// A Store over an S3-compatible object store (AWS S3, Ceph radosgw, MinIO):
// key "a/c/0/1" is the object "<prefix>/a/c/0/1" in the bucket.
//
// Thread-safety: every method may be called concurrently from any thread and
// any executor; the store's state after construction is immutable except
// for its HTTP client (see HttpStore: a connection pool per host, bounded
// requests in flight, retries with backoff). Payloads of 256 KiB or more are
// hashed (SHA-256, or MD5 for Content-MD5) on two threads the store owns,
// never on an I/O thread. Destroy the store only after its operations have
// completed.
//
// Protocol: REST with AWS Signature Version 4 header authorization (region
// and service "s3"), the payload signed (x-amz-content-sha256 = SHA-256 of
// the body) or UNSIGNED-PAYLOAD (then Content-MD5 protects uploads). get is
// GetObject (Range "bytes=a-b" / "bytes=-n"), exists is HeadObject, set is
// PutObject or, from multipart_threshold bytes on, a multipart upload
// (parts uploaded concurrently; aborted on failure), erase is DeleteObject,
// list is ListObjectsV2 (following continuation tokens; a truncated page
// without a new token is a StoreError, never a listing cut short), erase_many is
// DeleteObjects (1000 keys per request). Path-style ("host/bucket/key") or
// virtual-hosted ("bucket.host/key") addressing.
//
// Values: PutObject replaces an object atomically (S3 guarantees readers see
// the old or the new object), as does completing a multipart upload. Byte
// ranges follow Store::get: a range past the end is empty (S3 answers 416),
// a 206 answer is checked against the request (never wrong data), a 200
// answer to a range request is sliced locally up to max_full_body bytes.
// Content codings (e.g. an object stored with Content-Encoding: gzip):
// requests send "Accept-Encoding: identity"; an answer coded with gzip or
// deflate anyway is decoded (bounded like a body), and any other coding,
// any coding on a 206, or a corrupt stream fails with StoreError field
// "Content-Encoding" naming the coding and the key: never the coded bytes.
//
// Errors: StoreError naming the key, with the S3 error code as its field
// (e.g. "NoSuchBucket", "AccessDenied", "SignatureDoesNotMatch",
// "InvalidAccessKeyId"), the HTTP status and S3's message; "HTTP <status>"
// when there is no error document (HEAD). A missing key is not an error
// (NoSuchKey -> nullopt), but a missing bucket is. Transport failures and
// 5xx/429/408 are retried first (HttpClientOptions). InvalidArgument for bad
// keys and bad options.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include <zarrcoro/store.hpp>
#include <zarrcoro/store/http.hpp>

namespace zarrcoro {

struct S3Credentials {
  std::string access_key, secret_key;
  std::string session_token;  // temporary credentials only
};

enum class S3Addressing : std::uint8_t {
  automatic,       // virtual-hosted on AWS's own endpoints (bucket names without dots), else path
  path,            // http://host/bucket/key
  virtual_hosted,  // http://bucket.host/key
};

struct S3Options {
  std::string bucket;
  // Keys live under "<prefix>/"; "" is the bucket's root. Leading and
  // trailing slashes are ignored.
  std::string prefix;
  // "http(s)://host[:port]". Empty: $AWS_ENDPOINT_URL_S3, else
  // $AWS_ENDPOINT_URL, else https://s3.<region>.amazonaws.com.
  std::string endpoint;
  // Empty: $AWS_REGION, else $AWS_DEFAULT_REGION, else "us-east-1".
  std::string region;
  S3Addressing addressing = S3Addressing::automatic;
  // Empty: $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN.
  std::optional<S3Credentials> credentials;
  // Send unsigned requests (public buckets). Without it, a store with no
  // credentials cannot be constructed.
  bool anonymous = false;
  // Sign the payload's SHA-256 (true) or send UNSIGNED-PAYLOAD with a
  // Content-MD5 header on uploads (false).
  bool sign_payload = true;
  // Values of at least this many bytes are uploaded in parts of part_size
  // bytes (S3 requires parts of at least 5 MiB, the last one excepted),
  // multipart_concurrency parts at a time. 0 disables multipart uploads.
  std::uint64_t multipart_threshold = std::uint64_t{64} << 20;
  std::uint64_t part_size = std::uint64_t{16} << 20;
  unsigned multipart_concurrency = 4;
  // Keys per ListObjectsV2 page (1..1000).
  unsigned max_keys = 1000;
  // Largest whole object accepted when a range request is answered with 200.
  std::uint64_t max_full_body = std::uint64_t{64} << 20;
  HttpClientOptions http;

  // `base` (or default options) with bucket and prefix taken from
  // "s3://bucket[/prefix]". Raises InvalidArgument for another scheme or an
  // empty bucket name.
  static S3Options from_url(std::string_view url, S3Options base);
  static S3Options from_url(std::string_view url);
};

class S3Store : public Store {
 public:
  // Fills the empty settings from the environment (see S3Options). Raises
  // InvalidArgument for an empty bucket, a bad endpoint URL, or missing
  // credentials (unless anonymous). Makes no request.
  S3Store(boost::asio::any_io_executor io, S3Options options);
  ~S3Store() override;

  // Success: the (clipped) range of the object, or nullopt for NoSuchKey,
  // with the object's ETag as its generation (an empty range: HeadObject).
  // A condition is sent as If-Match (412: `changed`; to a read without
  // one, StoreError), and an answer of another ETag reads as changed.
  // Failure: InvalidArgument (bad key), StoreError (see above; e.g.
  // "HTTP 403" for a bad signature or a missing permission).
  awaitable<ReadResult> read(std::string key, ReadOptions options) override;
  // Success: the object holds exactly `value`, or no object is at the key
  // (also if there was none). Failure: InvalidArgument, StoreError (a failed
  // multipart upload is aborted; the old value stays).
  // Conditional on the object's ETag: PutObject with If-Match,
  // or If-None-Match: * for "only if absent" (412 or 409
  // ConditionalRequestConflict: nullopt). Each conditional PutObject
  // carries a unique id in user metadata (x-amz-meta-zarrcoro-write): when
  // it went out more than once, as after a lost answer, and then failed its
  // condition, a HeadObject finds whether the object there is this write,
  // landed (its generation) or another's (nullopt, even if its bytes are
  // the same). If this write landed and another replaced it before the
  // HeadObject, the answer is nullopt too: a caller that then re-reads and
  // writes again must be writing an idempotent change (as the engine's
  // read-modify-write of a chunk or shard is). A conditional write is a
  // single PutObject (no multipart upload): at most 5 GiB, else
  // UnsupportedError.
  // Returns the new ETag when the answer has one. DeleteObject cannot be
  // conditional (radosgw and S3 ignore If-Match on it): a conditional erase
  // checks the ETag with HeadObject, then deletes, so a write landing in
  // between is lost; erases_atomically() says so, and the engine never
  // erases conditionally here.
  awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                             WriteOptions options) override;
  bool erases_atomically() const override { return false; }
  // Success: sorted keys under the store's prefix that start with `prefix`.
  // Failure: StoreError.
  awaitable<std::vector<std::string>> list(std::string prefix) override;
  // list() with each object's Size from the same ListObjectsV2 pages.
  awaitable<std::vector<KeySize>> list_sizes(std::string prefix) override;
  // "s3://bucket/prefix"
  std::string url() const override;
  boost::asio::any_io_executor get_executor() const override;

  // One "directory" level (ListObjectsV2 with delimiter '/'): the keys
  // directly below `prefix` and the sub-prefixes (each ending in '/'), both
  // sorted and relative to the store's prefix. `prefix` is "" or ends in
  // '/'. Failure: StoreError.
  struct Listing {
    std::vector<std::string> keys, prefixes;
    std::vector<std::uint64_t> sizes;  // of `keys`, in order
  };
  awaitable<Listing> list_dir(std::string prefix);
  // Removes all `keys` with DeleteObjects (1000 per request). Success: none
  // of them exists (absent keys are fine). Failure: InvalidArgument (a bad
  // key, before any request), StoreError naming the first key S3 could not
  // delete and its error code.
  awaitable<void> erase_many(std::vector<std::string> keys) override;
  // Removes every key starting with `prefix` (list, then erase_many);
  // returns how many there were. Failure: StoreError.
  awaitable<std::size_t> erase_prefix(std::string prefix);
  // Creates the bucket (in the store's region). Success: the bucket exists
  // and is ours (also if it already was). Failure: StoreError (e.g.
  // BucketAlreadyExists: someone else's).
  awaitable<void> create_bucket();

  // The settings in use, environment defaults filled in (credentials
  // included: do not log them).
  const S3Options& options() const;
  HttpClientStats stats() const;

  struct Impl;  // s3.cpp

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace zarrcoro
