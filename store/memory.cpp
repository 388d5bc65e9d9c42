#include <zarrcoro/store/memory.hpp>

#include <algorithm>
#include <array>
#include <cassert>

namespace zarrcoro {

Generation MemoryStore::generation_of(const Entry* e) {
  return e ? Generation{"m" + std::to_string(e->version)} : Generation::absent();
}

awaitable<ReadResult> MemoryStore::read(std::string key, ReadOptions options) {
  co_return *MemoryStore::try_read_now(key, options);  // not virtual: always answers
}

// The range `options` selects from `value`, into `r`: copied to
// options.into when it fits exactly and the store reads into, else returned.
void MemoryStore::copy_out(const Bytes& value, const ReadOptions& options, ReadResult& r) const {
  const ByteExtent e = clip(options.range, value.size());
  const auto first = value.begin() + static_cast<std::ptrdiff_t>(e.begin);
  if (e.size() > 0 && e.size() == options.into.size() && reads_into()) {  // a subclass may say no
    std::copy_n(first, e.size(), options.into.begin());
    r.value.emplace();
    r.in_place = true;
  } else {
    r.value = Bytes(first, first + static_cast<std::ptrdiff_t>(e.size()));
  }
}

// Under mu_: looks `key` up and fills r's generation (and `changed`);
// returns the entry when its value is to be copied.
const MemoryStore::Entry* MemoryStore::look_up(const std::string& key, const ReadOptions& options,
                                               ReadResult& r) const {
  const auto it = values_.find(key);
  const Entry* e = it == values_.end() ? nullptr : &it->second;
  r.generation = generation_of(e);
  if (!options.if_equal.unknown() && options.if_equal != r.generation) {
    r.changed = true;
    return nullptr;
  }
  return e;
}

std::optional<ReadResult> MemoryStore::try_read_now(const std::string& key, const ReadOptions& options) {
  validate_key(key);
  ReadResult r;
  std::shared_ptr<const Bytes> value;
  {
    std::lock_guard lock(mu_);
    if (const Entry* e = look_up(key, options, r)) value = e->bytes;
  }
  if (value) copy_out(*value, options, r);
  return r;
}

void MemoryStore::try_read_now_many(std::span<const std::string> keys, std::span<const ReadOptions> options,
                                    std::span<ReadNow> out) {
  // One lock per group of keys. Values are copied under it up to a budget
  // of bytes per group (no reference count taken, so the lookups of a
  // group overlap in the memory system), the others after it is released:
  // a writer waits for at most a group's lookups and copies.
  assert(options.size() == keys.size() && out.size() == keys.size());
  constexpr std::size_t kGroup = 64;
  constexpr std::size_t kBytesUnderLock = 16 * 1024;
  // A key's error (out of memory for its copy) is that key's answer.
  auto answer = [&](std::size_t k, const Bytes& value) {
    try {
      copy_out(value, options[k], *out[k].result);
    } catch (...) {
      out[k] = {};
      out[k].error = std::current_exception();
    }
  };
  std::array<std::shared_ptr<const Bytes>, kGroup> later;
  for (std::size_t first = 0; first < keys.size(); first += kGroup) {
    const std::size_t n = std::min(kGroup, keys.size() - first);
    std::size_t budget = kBytesUnderLock;
    for (std::size_t k = first; k < first + n; ++k) {
      out[k] = {};
      try {
        validate_key(keys[k]);
        out[k].result.emplace();
      } catch (...) {
        out[k].error = std::current_exception();
      }
    }
    {
      std::lock_guard lock(mu_);
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t k = first + i;
        if (!out[k].result) continue;
        const Entry* e = look_up(keys[k], options[k], *out[k].result);
        if (!e) continue;
        if (e->bytes->size() > budget) {
          later[i] = e->bytes;
          continue;
        }
        budget -= e->bytes->size();
        answer(k, *e->bytes);
      }
    }
    for (std::size_t i = 0; i < n; ++i)
      if (later[i]) answer(first + i, *std::exchange(later[i], nullptr));
  }
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
