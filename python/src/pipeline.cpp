// zarrcoro._zarrcoro.ChunkCodec: batches of chunks decoded and encoded by the
// engine (zarrcoro/chunk_codec.hpp) for zarrcoro.pipeline, zarr-python's
// codec pipeline on the engine.
//
// A batch is one call: the items are checked under the GIL (every box must
// lie inside its destination or source array, so that no index computed in
// Python can make the engine write out of bounds), then handed to the
// engine with the GIL released, one pool submission per batch. The
// completion runs on the pool thread that ends the batch, takes the GIL only
// to make the result (None, or the encoded chunks as NumPy uint8 arrays that
// own their bytes) and completes the asyncio future once through the loop's
// call_soon_threadsafe. The arrays and buffers of the batch are kept alive
// until then. Thread-safety: as module.cpp.
#include "pipeline.hpp"
#include "completions.hpp"

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <nlohmann/json.hpp>

#include <zarrcoro/chunk_codec.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/npy.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>

namespace nb = nanobind;
using namespace nb::literals;

namespace zarrcoro_python {
namespace {

using zarrcoro::ChunkBox;
using zarrcoro::ChunkCodec;
using Dims = std::vector<std::uint64_t>;
using Strides = std::vector<std::int64_t>;

PipelineHooks hooks;

// One item from Python: key, box (start, step, count per chunk dimension;
// all empty: the whole chunk), and the place of box element 0 in an array
// as a byte offset from its data pointer with byte strides per chunk
// dimension.
using Box = std::tuple<Dims, Dims, Dims>;

// The memory of the Python objects of a batch, through the buffer protocol
// (NumPy arrays of any fixed-size data type, S<n>, U<n> and records
// included; bytes), held until the batch completes: release() under the GIL.
class Views {
 public:
  Views() = default;
  Views(const Views&) = delete;
  ~Views() { release(); }  // only ever with the GIL held, or with nothing held

  // An array's view with its strides (writable: for the engine to write).
  const Py_buffer& array(nb::handle obj, bool writable) {
    return get(obj, PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0));
  }
  // Contiguous bytes (an encoded chunk).
  const Py_buffer& bytes(nb::handle obj) { return get(obj, PyBUF_SIMPLE); }

  void release() {
    for (Py_buffer& b : held_) PyBuffer_Release(&b);
    held_.clear();
  }

 private:
  const Py_buffer& get(nb::handle obj, int flags) {
    Py_buffer b;
    if (PyObject_GetBuffer(obj.ptr(), &b, flags) != 0) throw nb::python_error();
    held_.push_back(b);
    return held_.back();
  }
  std::deque<Py_buffer> held_;  // stable addresses
};

// The extent of a buffer's elements relative to its pointer, bytes [lo, hi).
std::pair<std::int64_t, std::int64_t> extent(const Py_buffer& b) {
  std::int64_t lo = 0, hi = b.itemsize;
  for (int d = 0; d < b.ndim; ++d) {
    if (b.shape[d] == 0) return {0, 0};
    const std::int64_t span = (static_cast<std::int64_t>(b.shape[d]) - 1) * b.strides[d];
    (span < 0 ? lo : hi) += span;
  }
  return {lo, hi};
}

struct PyChunkCodec {
  ChunkCodec codec;
};

// A store of the engine on a local directory (a zarr-python LocalStore's
// root), whose I/O runs on the runtime's io_context. Declared first, the
// runtime outlives the store.
struct PyChunkStore {
  nb::object runtime;
  std::shared_ptr<zarrcoro::Store> store;
};

// The box made explicit, checked to lie in `array` (whose extent is `ext`)
// at `offset` with `strides`. InvalidArgument (field `what`) otherwise.
ChunkBox checked_box(const ChunkCodec& codec, const Box& box, std::int64_t offset, const Strides& strides,
                     std::pair<std::int64_t, std::int64_t> ext, const std::string& key, const char* what) {
  const auto& [start, step, count] = box;
  ChunkBox b{start, step, count};
  const std::size_t rank = codec.chunk_shape().size();
  const Dims& n = count.empty() && start.empty() && step.empty() ? codec.chunk_shape() : count;
  if (n.size() != rank || strides.size() != rank)
    throw zarrcoro::InvalidArgument(key, what, "a box and strides of one entry per chunk dimension expected");
  std::int64_t lo = offset, hi = offset + static_cast<std::int64_t>(codec.dtype().size());
  for (std::size_t d = 0; d < rank; ++d) {
    if (n[d] == 0) return b;  // nothing is touched
    if (n[d] > (std::uint64_t{1} << 62))
      throw zarrcoro::InvalidArgument(key, what, "a box dimension beyond any array");
    const std::int64_t span = (static_cast<std::int64_t>(n[d]) - 1) * strides[d];
    (span < 0 ? lo : hi) += span;
  }
  if (lo < ext.first || hi > ext.second)
    throw zarrcoro::InvalidArgument(key, what, "the box reaches outside the array");
  return b;
}

// The completion of a batch: completes `future` on `loop` once with
// `convert()` (under the GIL) or with the exception, then lets go of the
// Python objects under the GIL.
template <class Convert>
auto completion(nb::object loop, nb::object future, nb::object keep, std::shared_ptr<Views> views, Convert convert) {
  struct Pending {
    nb::object loop, future, keep;
    std::shared_ptr<Views> views;
  };
  auto pending =
      std::make_shared<Pending>(Pending{std::move(loop), std::move(future), std::move(keep), std::move(views)});
  return [pending, convert = std::move(convert)](std::exception_ptr error) mutable {
    const PythonCompletion completion;
    if (!completion.python()) {  // the process exits: its Python objects are left as they are
      (void)new Pending(std::move(*pending));
      return;
    }
    nb::gil_scoped_acquire gil;
    nb::object exc = nb::none(), value = nb::none();
    try {
      if (error) exc = hooks.exception(error);
      else value = convert();
    } catch (nb::python_error& e) {
      exc = nb::borrow(e.value());
    } catch (...) {
      exc = hooks.exception(std::current_exception());
    }
    try {
      nb::module_ aio = nb::module_::import_("zarrcoro._aio");
      pending->loop.attr("call_soon_threadsafe")(aio.attr("complete"), pending->future, exc, value);
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("zarrcoro: completing an asyncio future");  // the loop is closed
    }
    pending->views->release();
    pending->keep = nb::object();
    pending->future = nb::object();
    pending->loop = nb::object();
  };
}

// A NumPy uint8 array owning `bytes`.
nb::object owned_array(zarrcoro::Bytes&& bytes) {
  auto* held = new zarrcoro::Bytes(std::move(bytes));
  nb::capsule owner(held, [](void* p) noexcept { delete static_cast<zarrcoro::Bytes*>(p); });
  const std::size_t n = held->size();
  return nb::cast(nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(held->data(), {n}, owner));
}

nlohmann::json parse(const std::string& text, const std::string& key) { return zarrcoro::parse_json(text, key); }

// Decode items from Python: (key, encoded or None, out array, offset, strides, box).
auto decode_items(const ChunkCodec& codec, const nb::list& items, bool with_bytes, Views& views) {
  auto batch = std::make_shared<std::vector<zarrcoro::ChunkDecode>>();
  batch->reserve(items.size());
  for (nb::handle it : items) {
    auto [key, encoded, out, offset, strides, box] =
        nb::cast<std::tuple<std::string, nb::object, nb::object, std::int64_t, Strides, Box>>(it);
    const Py_buffer& o = views.array(out, true);
    if (static_cast<std::size_t>(o.itemsize) != codec.dtype().size())
      throw zarrcoro::InvalidArgument(key, "out", "an array of another element size");
    zarrcoro::ChunkDecode d;
    d.box = checked_box(codec, box, offset, strides, extent(o), key, "out");
    d.key = std::move(key);
    if (!encoded.is_none() && with_bytes) {
      const Py_buffer& e = views.bytes(encoded);
      d.encoded = zarrcoro::ByteSpan(static_cast<const std::byte*>(e.buf), static_cast<std::size_t>(e.len));
    }
    d.out = static_cast<std::byte*>(o.buf) + offset;
    d.out_strides = std::move(strides);
    batch->push_back(std::move(d));
  }
  return batch;
}

// Encode items from Python: (key, existing or None, value array, offset,
// strides, box, drop_if_fill, keep_rest).
auto encode_items(const ChunkCodec& codec, const nb::list& items, bool with_bytes, Views& views) {
  auto batch = std::make_shared<std::vector<zarrcoro::ChunkEncode>>();
  batch->reserve(items.size());
  for (nb::handle it : items) {
    auto [key, existing, value, offset, strides, box, drop, keep_rest] =
        nb::cast<std::tuple<std::string, nb::object, nb::object, std::int64_t, Strides, Box, bool, bool>>(it);
    const Py_buffer& v = views.array(value, false);
    if (static_cast<std::size_t>(v.itemsize) != codec.dtype().size())
      throw zarrcoro::InvalidArgument(key, "value", "an array of another element size");
    zarrcoro::ChunkEncode e;
    e.box = checked_box(codec, box, offset, strides, extent(v), key, "value");
    e.key = std::move(key);
    if (!existing.is_none() && with_bytes) {
      const Py_buffer& b = views.bytes(existing);
      e.existing = zarrcoro::ByteSpan(static_cast<const std::byte*>(b.buf), static_cast<std::size_t>(b.len));
    }
    e.value = static_cast<const std::byte*>(v.buf) + offset;
    e.value_strides = std::move(strides);
    e.drop_if_fill = drop;
    e.keep_rest = keep_rest;
    batch->push_back(std::move(e));
  }
  return batch;
}

}  // namespace

void register_pipeline(nb::module_& m, PipelineHooks h) {
  hooks = std::move(h);
  nb::class_<PyChunkCodec>(m, "ChunkCodec")
      .def_static(
          "from_metadata",
          [](const std::string& document) {
            const nlohmann::json doc = parse(document, "metadata");
            if (!doc.is_object()) throw zarrcoro::InvalidMetadata("metadata", "", "expected a JSON object");
            const bool v2 = doc.value("zarr_format", 3) == 2;
            const std::string key = v2 ? ".zarray" : "zarr.json";
            zarrcoro::ArrayMetadata meta =
                v2 ? zarrcoro::ArrayMetadata::from_v2_json(doc, doc.value("attributes", nlohmann::json()), key)
                   : zarrcoro::ArrayMetadata::from_json(doc, key);
            return PyChunkCodec{ChunkCodec::from_metadata(meta, key)};
          },
          "document"_a, "The pipeline of the array a v2 or v3 metadata document (JSON) describes.")
      .def_static(
          "from_codecs",
          [](const std::string& codecs, const std::string& data_type, Dims chunk_shape, nb::bytes fill) {
            const nlohmann::json list = parse(codecs, "codecs");
            const zarrcoro::DataType dtype = zarrcoro::parse_data_type(parse(data_type, "data_type"), "codecs");
            zarrcoro::FillValue f(fill.size());
            std::memcpy(f.data(), fill.c_str(), fill.size());
            return PyChunkCodec{ChunkCodec::from_codecs(list, dtype, std::move(chunk_shape), std::move(f), "codecs")};
          },
          "codecs"_a, "data_type"_a, "chunk_shape"_a, "fill"_a,
          "A pipeline from a v3 codecs list (JSON) for chunks of a v3 data_type (JSON), with one fill element.")
      .def_prop_ro("chunk_shape", [](const PyChunkCodec& c) { return c.codec.chunk_shape(); })
      .def_prop_ro("itemsize", [](const PyChunkCodec& c) { return c.codec.dtype().size(); })
      .def_prop_ro("npy_descr", [](const PyChunkCodec& c) { return zarrcoro::npy_descr(c.codec.dtype()); })
      .def_prop_ro("fill_bytes", [](const PyChunkCodec& c) {
        return nb::bytes(reinterpret_cast<const char*>(c.codec.fill().data()), c.codec.fill().size());
      })
      .def_prop_ro("encoded_size", [](const PyChunkCodec& c) { return c.codec.encoded_size(); })
      .def_prop_ro("trivial", [](const PyChunkCodec& c) { return c.codec.is_trivial(); })
      .def_prop_ro("codecs", [](const PyChunkCodec& c) { return c.codec.codecs().dump(); })
      .def("describe", [](const PyChunkCodec& c) { return c.codec.describe(); })
      .def(
          "with_shard_layout",
          [](const PyChunkCodec& c, const std::string& order, bool keep_empty) {
            using Order = zarrcoro::ShardLayout::Order;
            Order o = Order::lexicographic;  // also zarr-python's "unordered", which promises no order
            if (order == "morton") o = Order::morton;
            else if (order == "colexicographic") o = Order::colexicographic;
            else if (order != "lexicographic" && order != "unordered")
              throw zarrcoro::InvalidArgument("", "layout", "unknown inner chunk order '" + order + "'");
            return PyChunkCodec{c.codec.with_shard_layout({o, keep_empty})};
          },
          "order"_a, "keep_empty"_a,
          "This pipeline (sharding_indexed alone), storing a shard's inner chunks in zarr-python's "
          "subchunk_write_order `order`, and those all fill_value too if keep_empty.")
      .def(
          "decode",
          // items: (key, encoded or None, out array, offset, strides, box)
          [](PyChunkCodec& self, nb::handle runtime, nb::list items, nb::object loop, nb::object future) {
            zarrcoro::Runtime& rt = hooks.runtime(runtime);
            auto views = std::make_shared<Views>();
            auto batch = decode_items(self.codec, items, true, *views);
            auto done = completion(std::move(loop), std::move(future), nb::object(items), views,
                                   [] { return nb::none(); });
            nb::gil_scoped_release release;
            self.codec.async_decode(rt, *batch, [batch, done = std::move(done)](std::exception_ptr e) mutable {
              done(e);
            });
          },
          "runtime"_a, "items"_a, "loop"_a, "future"_a)
      .def(
          "encode",
          // items: (key, existing or None, value array, offset, strides, box, drop_if_fill, keep_rest);
          // completes with a list of uint8 arrays (None: dropped, all fill)
          [](PyChunkCodec& self, nb::handle runtime, nb::list items, nb::object loop, nb::object future) {
            zarrcoro::Runtime& rt = hooks.runtime(runtime);
            auto views = std::make_shared<Views>();
            auto batch = encode_items(self.codec, items, true, *views);
            auto done = completion(std::move(loop), std::move(future), nb::object(items), views, [batch]() {
              nb::list out;
              for (auto& e : *batch) out.append(e.encoded ? owned_array(std::move(*e.encoded)) : nb::none());
              return nb::object(out);
            });
            nb::gil_scoped_release release;
            self.codec.async_encode(rt, *batch, [batch, done = std::move(done)](std::exception_ptr e) mutable {
              done(e);
            });
          },
          "runtime"_a, "items"_a, "loop"_a, "future"_a)
      .def(
          "read",
          // items as decode (their encoded bytes unused): read from `store` by key;
          // completes with a list of bool (the key held a value)
          [](PyChunkCodec& self, PyChunkStore& store, nb::list items, nb::object loop, nb::object future) {
            zarrcoro::Runtime& rt = hooks.runtime(store.runtime);
            auto views = std::make_shared<Views>();
            auto batch = decode_items(self.codec, items, false, *views);
            auto done = completion(std::move(loop), std::move(future), nb::object(items), views, [batch]() {
              nb::list found;
              for (const auto& d : *batch) found.append(nb::bool_(d.found));
              return nb::object(found);
            });
            nb::gil_scoped_release release;
            self.codec.async_read(rt, store.store, *batch, [batch, done = std::move(done)](std::exception_ptr e) mutable {
              done(e);
            });
          },
          "store"_a, "items"_a, "loop"_a, "future"_a)
      .def(
          "read_now",
          // read's work on this thread where it needs no wait and no codec work (ChunkCodec::read_now): a list
          // of bool as read completes with, or None when it did not apply (nothing written: call read)
          [](PyChunkCodec& self, PyChunkStore& store, nb::list items) -> nb::object {
            zarrcoro::Runtime& rt = hooks.runtime(store.runtime);
            Views views;
            auto batch = decode_items(self.codec, items, false, views);
            bool done = false;
            {
              nb::gil_scoped_release release;
              done = self.codec.read_now(rt, *store.store, *batch);
            }
            if (!done) return nb::none();
            nb::list found;
            for (const auto& d : *batch) found.append(nb::bool_(d.found));
            return nb::object(found);
          },
          "store"_a, "items"_a)
      .def(
          "write",
          // items as encode (their existing bytes unused): stored under their keys in `store`
          [](PyChunkCodec& self, PyChunkStore& store, nb::list items, nb::object loop, nb::object future) {
            zarrcoro::Runtime& rt = hooks.runtime(store.runtime);
            auto views = std::make_shared<Views>();
            auto batch = encode_items(self.codec, items, false, *views);
            auto done = completion(std::move(loop), std::move(future), nb::object(items), views,
                                   [] { return nb::none(); });
            nb::gil_scoped_release release;
            self.codec.async_write(rt, store.store, *batch, [batch, done = std::move(done)](std::exception_ptr e) mutable {
              done(e);
            });
          },
          "store"_a, "items"_a, "loop"_a, "future"_a);

  nb::class_<PyChunkStore>(m, "ChunkStore")
      .def(
          "__init__",
          [](PyChunkStore* self, nb::object runtime, const std::string& root) {
            zarrcoro::Runtime& rt = hooks.runtime(runtime);
            new (self) PyChunkStore{runtime, std::make_shared<zarrcoro::FilesystemStore>(rt.io_executor(), root)};
          },
          "runtime"_a, "root"_a, "The engine's file store on a directory, for ChunkCodec.read and write.")
      .def_prop_ro("url", [](const PyChunkStore& s) { return s.store->url(); });
}

}  // namespace zarrcoro_python
