// The Store base class's shared parts: key validation, byte-range clipping,
// the shorthands over read and write, and the optional methods' defaults (store.hpp).
#include <algorithm>
#include <cassert>
#include <zarrcoro/error.hpp>
#include <zarrcoro/store.hpp>

namespace zarrcoro {

ByteExtent clip(const ByteRange& range, std::uint64_t size) {
  std::uint64_t begin = 0, end = size;
  switch (range.kind) {
    case ByteRange::Kind::full:
      break;
    case ByteRange::Kind::range:
      begin = std::min(range.offset, size);
      end = begin + std::min(range.length, size - begin);
      break;
    case ByteRange::Kind::suffix:
      begin = size - std::min(range.length, size);
      break;
  }
  return {begin, end};
}

void validate_key(const std::string& key) {
  auto bad = [&](const char* why) { throw InvalidArgument(key, "key", why); };
  if (key.empty()) bad("empty key");
  if (key.front() == '/') bad("absolute keys are not allowed");
  if (key.find('\0') != std::string::npos) bad("NUL byte in key");
  if (key.find('\\') != std::string::npos) bad("backslash in key");
  std::size_t start = 0;
  while (true) {
    const std::size_t end = key.find('/', start);
    const std::string_view seg(key.data() + start,
                               (end == std::string::npos ? key.size() : end) - start);
    if (seg.empty()) bad("empty path segment");
    if (seg == "." || seg == "..") bad("'.' and '..' segments are not allowed");
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

awaitable<std::optional<Bytes>> Store::get(std::string key, ByteRange range) {
  ReadOptions options;  // named: g++ 12 miscompiles a braced temporary beside co_await
  options.range = range;
  options.need_generation = false;
  ReadResult r = co_await read(std::move(key), std::move(options));
  co_return std::move(r.value);
}

awaitable<void> Store::set(std::string key, Bytes value) {
  WriteOptions unconditional;
  co_await write(std::move(key), std::move(value), std::move(unconditional));
}

awaitable<void> Store::erase(std::string key) {
  WriteOptions unconditional;
  std::optional<Bytes> none;  // named: g++ 12 and temporaries beside co_await
  co_await write(std::move(key), std::move(none), std::move(unconditional));
}

awaitable<bool> Store::exists(std::string key) {
  ReadOptions options;
  options.range = ByteRange::from(0, 0);
  options.need_generation = false;
  ReadResult r = co_await read(std::move(key), std::move(options));
  co_return r.value.has_value();
}

awaitable<std::vector<KeySize>> Store::list_sizes(std::string prefix) {
  std::vector<std::string> keys = co_await list(std::move(prefix));
  std::vector<KeySize> out;
  for (auto& key : keys) {
    const std::optional<Bytes> value = co_await get(key);
    if (!value) continue;
    KeySize ks;
    ks.key = std::move(key);
    ks.size = value->size();
    out.push_back(std::move(ks));
  }
  co_return out;
}

awaitable<void> Store::erase_many(std::vector<std::string> keys) {
  for (auto& key : keys) co_await erase(std::move(key));
}

std::optional<ReadResult> Store::try_read_now(const std::string&, const ReadOptions&) { return std::nullopt; }

void Store::try_read_now_many(std::span<const std::string> keys, std::span<const ReadOptions> options,
                              std::span<ReadNow> out) {
  assert(options.size() == keys.size() && out.size() == keys.size());
  for (std::size_t k = 0; k < keys.size(); ++k) {
    out[k] = {};
    try {
      out[k].result = try_read_now(keys[k], options[k]);
    } catch (...) {
      out[k].error = std::current_exception();
    }
  }
}

}  // namespace zarrcoro
