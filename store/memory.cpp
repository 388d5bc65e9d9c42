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

awaitable<std::optional<Bytes>> MemoryStore::get(std::string key, ByteRange range) {
  validate_key(key);
  std::shared_ptr<const Bytes> value;
  {
    std::lock_guard lock(mu_);
    auto it = values_.find(key);
    if (it == values_.end()) co_return std::nullopt;
    value = it->second;
  }
  const ByteExtent e = clip(range, value->size());
  co_return Bytes(value->begin() + e.begin, value->begin() + e.end);
}

awaitable<void> MemoryStore::set(std::string key, Bytes value) {
  validate_key(key);
  auto shared = std::make_shared<const Bytes>(std::move(value));
  std::lock_guard lock(mu_);
  values_.insert_or_assign(std::move(key), std::move(shared));
  co_return;
}

awaitable<void> MemoryStore::erase(std::string key) {
  validate_key(key);
  std::shared_ptr<const Bytes> old;  // freed outside the lock
  {
    std::lock_guard lock(mu_);
    if (auto it = values_.find(key); it != values_.end()) {
      old = std::move(it->second);
      values_.erase(it);
    }
  }
  co_return;
}

awaitable<bool> MemoryStore::exists(std::string key) {
  validate_key(key);
  std::lock_guard lock(mu_);
  co_return values_.contains(key);
}

awaitable<std::vector<std::string>> MemoryStore::list(std::string prefix) {
  std::vector<std::string> keys;
  {
    std::lock_guard lock(mu_);
    for (auto it = values_.lower_bound(prefix);
         it != values_.end() && it->first.starts_with(prefix); ++it)
      keys.push_back(it->first);
  }
  co_return keys;
}

std::string MemoryStore::url() const { return "memory://"; }

std::size_t MemoryStore::size() const {
  std::lock_guard lock(mu_);
  return values_.size();
}

}  // namespace zarrcoro
