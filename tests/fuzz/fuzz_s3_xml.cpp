// S3 response bodies as S3Store reads them (store/s3_xml.hpp): a
// ListObjectsV2 result page, an error body (<Code>, <Message>), and the
// <Error> entries of a DeleteObjects result; plus the SigV4 string helpers
// the store signs requests with (store/sigv4.hpp). Properties:
// xml_unescape(xml_escape(s)) == s, uri_decode(uri_encode(s)) == s, and a
// normalized path starts with '/'.
#include "fuzz_common.hpp"
#include "store/s3_xml.hpp"
#include "store/sigv4.hpp"

using namespace zarrcoro;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view doc = fuzz::text(data, size);

  fuzz::typed([&] {
    const s3xml::ListPage page = s3xml::parse_list(doc);
    (void)s3xml::parse_error(doc);
    std::size_t pos = 0;
    while (auto err = s3xml::xml_next(doc, "Error", pos)) {
      (void)s3xml::xml_first(*err, "Key");
      (void)s3xml::xml_first(*err, "Code");
      (void)s3xml::xml_first(*err, "Message");
    }
    fuzz::check(s3xml::xml_unescape(s3xml::xml_escape(doc)) == doc, "xml_unescape(xml_escape(s)) != s");

    // Listed keys go back to the server in continuation requests: sign them.
    sigv4::Pairs query{{"list-type", "2"}, {"continuation-token", page.next}};
    for (const auto& k : page.keys) query.emplace_back("prefix", k);
    (void)sigv4::canonical_query(query);
    for (const auto& k : page.keys) {
      fuzz::check(sigv4::uri_decode(sigv4::uri_encode(k, false)) == k, "uri_decode(uri_encode(k)) != k");
      (void)sigv4::normalize_path(k);
    }
  });
  fuzz::typed([&] {
    fuzz::check(sigv4::uri_decode(sigv4::uri_encode(doc, true)) == doc, "uri_decode(uri_encode(s)) != s");
    (void)sigv4::uri_decode(doc);
    const std::string n = sigv4::normalize_path(doc);
    fuzz::check(!n.empty() && n.front() == '/', "a normalized path does not start with '/'");
    sigv4::Pairs headers{{"host", "example.invalid"}, {std::string(doc.substr(0, 16)), std::string(doc)}};
    (void)sigv4::canonical_headers(headers);
  });
  return 0;
}
