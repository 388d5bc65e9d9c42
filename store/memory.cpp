#include <zarrcoro/store/memory.hpp>

#include <algorithm>

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

Generation MemoryStore::generation_of(const Entry* e) {
  return e ? Generation{"m" + std::to_string(e->version)} : Generation::absent();
}

awaitable<ReadResult> MemoryStore::read(std::string key, ReadOptions options) {
  co_return *MemoryStore::try_read_now(key, options);  // not virtual: always answers
}

std::optional<ReadResult> MemoryStore::try_read_now(const std::string& key, const ReadOptions& options) {
  validate_key(key);
  ReadResult r;
  std::shared_ptr<const Bytes> value;
  {
    std::lock_guard lock(mu_);
    const auto it = values_.find(key);
    const Entry* e = it == values_.end() ? nullptr : &it->second;
    r.generation = generation_of(e);
    if (!options.if_equal.unknown() && options.if_equal != r.generation) {
      r.changed = true;
      return r;
    }
    if (e) value = e->bytes;
  }
  if (!value) return r;
  const ByteExtent e = clip(options.range, value->size());
  const auto first = value->begin() + static_cast<std::ptrdiff_t>(e.begin);
  if (e.size() > 0 && e.size() == options.into.size() && reads_into()) {  // a subclass may say no
    std::copy_n(first, e.size(), options.into.begin());
    r.value.emplace();
    r.in_place = true;
  } else {
    r.value = Bytes(first, first + static_cast<std::ptrdiff_t>(e.size()));
  }
  return r;
}

awaitable<std::optional<Generation>> MemoryStore::write(std::string key, std::optional<Bytes> value,
                                                        WriteOptions options) {
  validate_key(key);
  std::shared_ptr<const Bytes> shared, old;  // allocated and freed outside the lock
  if (value) shared = std::make_shared<const Bytes>(std::move(*value));
  std::lock_guard lock(mu_);
  const auto it = values_.find(key);
  if (!options.if_equal.unknown() &&
      options.if_equal != generation_of(it == values_.end() ? nullptr : &it->second))
    co_return std::nullopt;
  if (!shared) {
    if (it != values_.end()) {
      old = std::move(it->second.bytes);
      values_.erase(it);
    }
    co_return Generation::absent();
  }
  const Entry entry{std::move(shared), next_version_++};
  Generation g = generation_of(&entry);
  values_.insert_or_assign(std::move(key), entry);
  co_return g;
}

awaitable<std::optional<Bytes>> MemoryStore::get(std::string key, ByteRange range) {
  return get_by_read(std::move(key), range);
}

awaitable<void> MemoryStore::set(std::string key, Bytes value) {
  return set_by_write(std::move(key), std::move(value));
}

awaitable<void> MemoryStore::erase(std::string key) { return set_by_write(std::move(key), std::nullopt); }

awaitable<bool> MemoryStore::exists(std::string key) {
  validate_key(key);
  std::lock_guard lock(mu_);
  co_return values_.contains(key);
}

awaitable<std::vector<KeySize>> MemoryStore::list_sizes(std::string prefix) {
  std::vector<KeySize> out;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, entry] : values_)
      if (key.starts_with(prefix)) {
        KeySize ks;
        ks.key = key;
        ks.size = entry.bytes->size();
        out.push_back(std::move(ks));
      }
  }
  std::sort(out.begin(), out.end(), [](const KeySize& a, const KeySize& b) { return a.key < b.key; });
  co_return out;
}

awaitable<std::vector<std::string>> MemoryStore::list(std::string prefix) {
  std::vector<std::string> keys;
  {
    std::lock_guard lock(mu_);
    for (const auto& entry : values_)
      if (entry.first.starts_with(prefix)) keys.push_back(entry.first);
  }
  std::sort(keys.begin(), keys.end());
  co_return keys;
}

std::string MemoryStore::url() const { return "memory://"; }

std::size_t MemoryStore::size() const {
  std::lock_guard lock(mu_);
  return values_.size();
}

}  // namespace zarrcoro
