#include <zarrcoro/store/counting.hpp>

#include <zarrcoro/error.hpp>

namespace zarrcoro {

CountingStore::CountingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {
  if (!inner_) throw InvalidArgument("", "inner", "CountingStore needs an inner store");
}

awaitable<ReadResult> CountingStore::read(std::string key, ReadOptions options) {
  count_get(key, options.range);
  const std::size_t into_bytes = options.into.size();
  auto r = co_await inner_->read(std::move(key), std::move(options));
  count_result(r, into_bytes);
  co_return r;
}

// Counted only when the inner store answered (else the caller reads).
std::optional<ReadResult> CountingStore::try_read_now(const std::string& key, const ReadOptions& options) {
  std::optional<ReadResult> r;
  try {
    r = inner_->try_read_now(key, options);
  } catch (...) {
    count_get(key, options.range);
    throw;
  }
  if (r) {
    count_get(key, options.range);
    count_result(*r, options.into.size());
  }
  return r;
}

void CountingStore::try_read_now_many(std::span<const std::string> keys, std::span<const ReadOptions> options,
                                      std::span<ReadNow> out) {
  inner_->try_read_now_many(keys, options, out);
  for (std::size_t k = 0; k < keys.size(); ++k) {
    if (!out[k].result && !out[k].error) continue;
    count_get(keys[k], options[k].range);
    if (out[k].result) count_result(*out[k].result, options[k].into.size());
  }
}

void CountingStore::count_get(const std::string& key, const ByteRange& range) {
  ++gets_;
  std::lock_guard lock(log_mu_);
  log_.emplace_back(key, range);
}

void CountingStore::count_result(const ReadResult& r, std::size_t into_bytes) {
  if (r.in_place) get_bytes_ += into_bytes;
  else if (r.value) get_bytes_ += r.value->size();
  else if (r.changed) ++conflicts_;
  else ++get_misses_;
}

awaitable<std::optional<Generation>> CountingStore::write(std::string key, std::optional<Bytes> value,
                                                          WriteOptions options) {
  if (value) {
    ++sets_;
    set_bytes_ += value->size();
  } else {
    ++erases_;
  }
  auto g = co_await inner_->write(std::move(key), std::move(value), std::move(options));
  if (!g) ++conflicts_;
  co_return g;
}

awaitable<std::vector<KeySize>> CountingStore::list_sizes(std::string prefix) {
  ++lists_;
  co_return co_await inner_->list_sizes(std::move(prefix));
}

awaitable<std::vector<std::string>> CountingStore::list(std::string prefix) {
  ++lists_;
  co_return co_await inner_->list(std::move(prefix));
}

std::string CountingStore::url() const { return "counting+" + inner_->url(); }

CountingStore::Counts CountingStore::counts() const {
  return {gets_, get_bytes_, get_misses_, sets_, set_bytes_, erases_, conflicts_, lists_};
}

std::vector<std::pair<std::string, ByteRange>> CountingStore::gets_log() const {
  std::lock_guard lock(log_mu_);
  return log_;
}

void CountingStore::reset() {
  for (auto* c : {&gets_, &get_bytes_, &get_misses_, &sets_, &set_bytes_, &erases_, &lists_, &conflicts_})
    *c = 0;
  std::lock_guard lock(log_mu_);
  log_.clear();
}

}  // namespace zarrcoro
