// zarrcoro._zarrcoro: the native half of the Python package (python/zarrcoro
// holds the Python half: selections, dtypes, asyncio futures).
//
// Thread-safety: every function may be called from any Python thread. The
// GIL is released for all engine work; completion callbacks of the async
// calls run on an engine thread, take the GIL only to turn the result into
// Python objects (None, or a list of str / bytes) and hand it to the event
// loop (loop.call_soon_threadsafe), and never run Python code of their own
// otherwise.
//
// Lifetime: a Runtime handle, and every Array and Group opened through it,
// share one engine Runtime, destroyed when the last of them goes (an
// Array's store must not outlive the io_context it was made on). close()
// refuses new operations at once.
#include <atomic>
#include <functional>
#include <future>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <nlohmann/json.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/npy.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/memory.hpp>
#include <zarrcoro/store/open.hpp>

#include "core/caught.hpp"
#include "completions.hpp"
#include "pipeline.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using zarrcoro_python::PythonCompletion;
using zarrcoro::Array;
using zarrcoro::Group;
using zarrcoro::Region;
using Shape = std::vector<std::uint64_t>;

namespace {

// The engine Runtime behind a Python Runtime and its handles.
struct Engine {
  std::unique_ptr<zarrcoro::Runtime> rt;
  std::atomic<bool> closed{false};
  std::mutex stores_mu;
  std::map<std::string, std::shared_ptr<zarrcoro::Store>> memory_stores;  // "memory://name" -> its store

  zarrcoro::Runtime& runtime() {
    if (closed) throw zarrcoro::InvalidArgument("", "runtime", "the runtime is closed");
    return *rt;
  }
  // A store for `url`: a path, file://, http(s)://, s3:// or memory://NAME
  // (one MemoryStore per name for the Runtime's life, so that what one call
  // creates another can open).
  std::shared_ptr<zarrcoro::Store> store(const std::string& url, const zarrcoro::OpenOptions& options) {
    if (url.starts_with("memory://")) {
      std::lock_guard lock(stores_mu);
      auto& s = memory_stores[url];
      if (!s) s = std::make_shared<zarrcoro::MemoryStore>();
      return s;
    }
    return zarrcoro::open_store(url, runtime().io_executor(), options);
  }
  ~Engine() {
    nb::gil_scoped_release release;  // destroying waits for operations in flight
    memory_stores.clear();
    rt.reset();
  }
};

struct PyRuntime {
  std::shared_ptr<Engine> engine;
};

struct PyArray {
  std::shared_ptr<Engine> engine;  // destroyed after `array` (declared first)
  Array array;
};

struct PyGroup {
  std::shared_ptr<Engine> engine;
  Group group;
};

// An operation in flight from Python: cancel() asks the engine to stop it
// (Asio terminal cancellation, emitted on the I/O executor).
struct PyOperation {
  std::shared_ptr<Engine> engine;
  std::shared_ptr<boost::asio::cancellation_signal> signal = std::make_shared<boost::asio::cancellation_signal>();
  void cancel() {
    if (engine->closed) return;
    boost::asio::post(engine->rt->io_executor(),
                      [s = signal] { s->emit(boost::asio::cancellation_type::terminal); });
  }
};

// The Python classes for zarrcoro's error kinds (zarrcoro.errors), set by
// the package at import.
nb::object error_classes;

void raise_python(const zarrcoro::Error& e) {
  nb::object cls = error_classes.is_valid() ? error_classes[zarrcoro::to_string(e.code())] : nb::none();
  if (!cls.is_valid() || cls.is_none()) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return;
  }
  nb::object exc = cls(nb::str(e.what()), nb::str(e.key().c_str()), nb::str(e.field().c_str()),
                       nb::str(e.detail().c_str()));
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

zarrcoro::S3Credentials& credentials(zarrcoro::OpenOptions& o) {
  if (!o.s3.credentials) o.s3.credentials.emplace();
  return *o.s3.credentials;
}

// A str, else InvalidArgument (field "storage_options") naming the option.
std::string option_text(nb::handle v, const std::string& key) {
  if (!nb::isinstance<nb::str>(v))
    throw zarrcoro::InvalidArgument("", "storage_options", "option '" + key + "' must be a str");
  return nb::cast<std::string>(v);
}

zarrcoro::OpenOptions open_options(const nb::dict& o) {
  zarrcoro::OpenOptions out;
  for (auto [k, v] : o) {
    const std::string key = nb::isinstance<nb::str>(k) ? nb::cast<std::string>(k) : std::string(nb::repr(k).c_str());
    if (v.is_none()) continue;
    if (key == "endpoint") out.s3.endpoint = option_text(v, key);
    else if (key == "region") out.s3.region = option_text(v, key);
    else if (key == "access_key_id") credentials(out).access_key = option_text(v, key);
    else if (key == "secret_access_key") credentials(out).secret_key = option_text(v, key);
    else if (key == "session_token") credentials(out).session_token = option_text(v, key);
    else throw zarrcoro::InvalidArgument("", "storage_options", "unknown option '" + key + "'");
  }
  return out;
}

Region region_of(const Shape& start, const Shape& stop) { return Region{start, stop}; }

// C-contiguous buffers: one to fill, one to read.
using Buffer = nb::ndarray<nb::c_contig, nb::device::cpu>;
using ConstBuffer = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
// The buffer's bytes; InvalidArgument(field `what`) unless there are `expected`.
template <class B>
auto bytes_of(B& b, std::size_t expected, const char* what) {
  const std::size_t n = b.nbytes();
  if (n != expected)
    throw zarrcoro::InvalidArgument("", what,
                                    "the buffer holds " + std::to_string(n) + " bytes, the region needs " +
                                        std::to_string(expected));
  using Byte = std::conditional_t<std::is_same_v<B, ConstBuffer>, const std::byte, std::byte>;
  return std::span<Byte>(static_cast<Byte*>(b.data()), n);
}

std::size_t region_bytes(const PyArray& a, const Region& r) {
  return static_cast<std::size_t>(r.num_elements()) * a.array.dtype().size();
}

// A Python exception object for the exception an operation raised.
nb::object python_exception(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const zarrcoro::Error& e) {
    raise_python(e);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nb::steal(PyErr_GetRaisedException());
}

// Starts `start(handler)` and completes `future` on `loop` once: with the
// Python object `convert(result...)` makes under the GIL (None without a
// result), or with the exception the operation raised. `keep` (the caller's
// buffer) lives until then.
template <class Start, class Convert>
PyOperation start_async(const std::shared_ptr<Engine>& engine, nb::object loop, nb::object future, nb::object keep,
                        Start start, Convert convert) {
  PyOperation op{engine};
  struct Pending {
    nb::object loop, future, keep;
  };
  auto pending = std::make_shared<Pending>(Pending{std::move(loop), std::move(future), std::move(keep)});
  auto handler = [pending, convert](std::exception_ptr error, auto&&... result) {
    const PythonCompletion completion;
    if (!completion.python()) {  // the process exits: its Python objects are left as they are
      (void)new Pending(std::move(*pending));
      return;
    }
    nb::gil_scoped_acquire gil;
    nb::object exc = nb::none(), value = nb::none();
    if (error) exc = python_exception(error);
    else value = convert(result...);
    try {
      nb::module_ aio = nb::module_::import_("zarrcoro._aio");
      pending->loop.attr("call_soon_threadsafe")(aio.attr("complete"), pending->future, exc, value);
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("zarrcoro: completing an asyncio future");  // the loop is closed
    }
    // Let go of the Python objects here, under the GIL: the handler itself
    // is destroyed later on this engine thread, without it.
    pending->keep = nb::object();
    pending->future = nb::object();
    pending->loop = nb::object();
  };
  {
    nb::gil_scoped_release release;
    start(boost::asio::bind_cancellation_slot(op.signal->slot(), std::move(handler)));
  }
  return op;
}

template <class Start>
PyOperation start_async(const std::shared_ptr<Engine>& engine, nb::object loop, nb::object future, nb::object keep,
                        Start start) {
  return start_async(engine, std::move(loop), std::move(future), std::move(keep), std::move(start),
                     [] { return nb::none(); });
}

// Strings as Python objects: str for a `string` array (valid UTF-8: checked
// on decode), bytes for a `bytes` array. Under the GIL.
bool is_text(const Array& a) { return a.dtype().kind() == zarrcoro::DataTypeKind::string; }
nb::list python_strings(bool text, const std::vector<std::string>& values) {
  nb::list out;
  for (const auto& v : values)
    out.append(text ? nb::object(nb::str(v.data(), v.size())) : nb::object(nb::bytes(v.data(), v.size())));
  return out;
}

// Python str / bytes items as the engine's strings. Under the GIL.
std::vector<std::string> engine_strings(const nb::list& items) {
  std::vector<std::string> values;
  values.reserve(items.size());
  for (nb::handle item : items) {
    if (nb::isinstance<nb::str>(item)) values.emplace_back(nb::cast<std::string>(item));
    else if (nb::isinstance<nb::bytes>(item))
      values.emplace_back(nb::cast<nb::bytes>(item).c_str(), nb::cast<nb::bytes>(item).size());
    else throw zarrcoro::InvalidArgument("", "value", "expected str or bytes items");
  }
  return values;
}

// Slabs: boxes of equal size written from consecutive pieces of one buffer
// (a write through slices with steps other than 1 and -1 becomes one box per
// selected index along each such axis, so that no element between them is
// written). Rows of `starts` / `stops` (n x rank, uint64) are the boxes.
using Boxes = nb::ndarray<const std::uint64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

struct SlabPlan {
  std::vector<Region> regions;
  std::uint64_t elements_each = 0;  // every box holds as many elements
};

SlabPlan slab_plan(const Boxes& starts, const Boxes& stops, std::size_t rank) {
  if (starts.shape(0) != stops.shape(0) || starts.shape(1) != rank || stops.shape(1) != rank)
    throw zarrcoro::InvalidArgument("", "selection", "starts and stops must both be n x rank");
  SlabPlan plan;
  plan.regions.reserve(starts.shape(0));
  for (std::size_t i = 0; i < starts.shape(0); ++i) {
    Region r;
    r.start.assign(starts.data() + i * rank, starts.data() + (i + 1) * rank);
    r.stop.assign(stops.data() + i * rank, stops.data() + (i + 1) * rank);
    for (std::size_t d = 0; d < rank; ++d)
      if (r.start[d] > r.stop[d]) throw zarrcoro::InvalidArgument("", "selection", "a box with start > stop");
    const std::uint64_t n = r.num_elements();
    if (i == 0) plan.elements_each = n;
    else if (n != plan.elements_each) throw zarrcoro::InvalidArgument("", "selection", "boxes of different sizes");
    plan.regions.push_back(std::move(r));
  }
  return plan;
}

// Writes the slabs at most kSlabsInFlight at once (the engine serializes
// writes to one chunk; boxes in different chunks proceed together) and
// calls `handler(std::exception_ptr)` once, after the last write started
// has finished: with the first error, after which no further slab starts.
// Cancellation through the handler's slot stops starting slabs and
// completes with Cancelled. `write(region, i, done)` starts slab i.
template <class Handler>
class SlabWrite : public std::enable_shared_from_this<SlabWrite<Handler>> {
 public:
  using Write = std::function<void(const Region&, std::size_t, std::function<void(std::exception_ptr)>)>;
  static constexpr std::size_t kSlabsInFlight = 64;

  SlabWrite(std::vector<Region> regions, Write write, Handler handler)
      : regions_(std::move(regions)), write_(std::move(write)), handler_(std::move(handler)) {}

  void start() {
    auto slot = boost::asio::get_associated_cancellation_slot(handler_);
    if (slot.is_connected())  // assigned before anyone can emit (PyOperation::cancel comes later)
      slot.assign([w = std::weak_ptr<SlabWrite>(this->shared_from_this())](boost::asio::cancellation_type) {
        if (auto self = w.lock()) {
          std::lock_guard lock(self->mu_);
          if (!self->error_)
            self->error_ = std::make_exception_ptr(zarrcoro::Cancelled("", "", "the write was cancelled"));
        }
      });
    pump();
  }

 private:
  void pump() {
    std::vector<std::size_t> starting;
    bool finished = false;
    std::exception_ptr error;
    {
      std::lock_guard lock(mu_);
      while (!error_ && next_ < regions_.size() && in_flight_ < kSlabsInFlight) {
        starting.push_back(next_++);
        ++in_flight_;
      }
      if (in_flight_ == 0 && !finished_ && (error_ || next_ == regions_.size())) {
        finished = finished_ = true;
        error = error_;
      }
    }
    for (std::size_t i : starting) {
      std::exception_ptr failed = zarrcoro::caught(
          [&] { write_(regions_[i], i, [self = this->shared_from_this()](std::exception_ptr e) { self->done(e); }); });
      if (failed) done(std::move(failed));
    }
    if (finished) std::move(handler_)(error);
  }
  void done(std::exception_ptr e) {
    {
      std::lock_guard lock(mu_);
      --in_flight_;
      if (e && !error_) error_ = e;
    }
    pump();
  }

  std::vector<Region> regions_;
  Write write_;
  Handler handler_;
  std::mutex mu_;
  std::size_t next_ = 0, in_flight_ = 0;
  bool finished_ = false;
  std::exception_ptr error_;
};

template <class Handler>
void start_slabs(std::vector<Region> regions, typename SlabWrite<Handler>::Write write, Handler handler) {
  if (regions.empty()) {
    std::move(handler)(std::exception_ptr());
    return;
  }
  std::make_shared<SlabWrite<Handler>>(std::move(regions), std::move(write), std::move(handler))->start();
}

// Starts slab i of `data` (fixed-size elements) with a.async_write.
auto fixed_slab_writer(const Array& a, std::span<const std::byte> data, std::size_t bytes_each) {
  return [a, data, bytes_each](const Region& r, std::size_t i, std::function<void(std::exception_ptr)> done) {
    a.async_write(r, data.subspan(i * bytes_each, bytes_each), std::move(done));
  };
}
// Starts slab i of `values` (strings) with a.async_write_strings.
auto string_slab_writer(const Array& a, std::shared_ptr<const std::vector<std::string>> values, std::size_t each) {
  return [a, values, each](const Region& r, std::size_t i, std::function<void(std::exception_ptr)> done) {
    a.async_write_strings(r, std::span<const std::string>(*values).subspan(i * each, each), std::move(done));
  };
}

// Runs start_slabs and waits (the GIL released by the caller).
void write_slabs_blocking(std::vector<Region> regions,
                          std::function<void(const Region&, std::size_t, std::function<void(std::exception_ptr)>)> write) {
  std::promise<void> done;
  auto finished = done.get_future();
  start_slabs(std::move(regions), std::move(write), [&done](std::exception_ptr e) {
    if (e) done.set_exception(e);
    else done.set_value();
  });
  finished.get();
}

nb::str dump(const nlohmann::json& j) { return nb::str(j.dump().c_str()); }
nlohmann::json parse(const std::string& text, const char* what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw zarrcoro::InvalidArgument("", what, e.what());
  }
}

}  // namespace

NB_MODULE(_zarrcoro, m) {
  m.doc() = "zarrcoro's native engine (use the zarrcoro package)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const zarrcoro::Error& e) {
      raise_python(e);
    }
  });
  m.def("_set_error_classes", [](nb::dict classes) { error_classes = classes; });
  m.def("_drain_completions", &zarrcoro_python::drain_completions,
        "Waits until no engine thread is completing an operation into Python (called at exit).");
  // The classes outlive no interpreter: dropped at exit.
  nb::module_::import_("atexit").attr("register")(nb::cpp_function([] { error_classes = nb::object(); }));

  nb::class_<PyRuntime>(m, "Runtime")
      .def(
          "__init__",
          [](PyRuntime* self, unsigned codec_threads, unsigned io_threads, std::size_t max_inflight_bytes,
             std::size_t max_inflight_requests) {
            zarrcoro::RuntimeOptions o;
            o.codec_threads = codec_threads;
            o.io_threads = io_threads == 0 ? 1 : io_threads;
            if (max_inflight_bytes) o.max_inflight_bytes = max_inflight_bytes;
            if (max_inflight_requests) o.max_inflight_requests = max_inflight_requests;
            auto engine = std::make_shared<Engine>();
            engine->rt = std::make_unique<zarrcoro::Runtime>(o);
            new (self) PyRuntime{std::move(engine)};
          },
          "codec_threads"_a = 0, "io_threads"_a = 1, "max_inflight_bytes"_a = 0, "max_inflight_requests"_a = 0)
      .def("close", [](PyRuntime& r) { r.engine->closed = true; })
      .def_prop_ro("closed", [](const PyRuntime& r) { return r.engine->closed.load(); })
      .def_prop_ro("codec_threads", [](PyRuntime& r) { return r.engine->runtime().codec_threads(); })
      .def("stats", [](PyRuntime& r) {
        const auto s = r.engine->runtime().stats();
        nb::dict d;
        d["pool_submissions"] = s.pool_submissions;
        d["inline_batches"] = s.inline_batches;
        d["chunks"] = s.chunks;
        d["codec_calls"] = s.codec_calls;
        d["codec_calls_on_io_thread"] = s.codec_calls_on_io_thread;
        d["codec_calls_off_pool"] = s.codec_calls_off_pool;
        d["caller_reads"] = s.caller_reads;
        return d;
      });

  nb::class_<PyOperation>(m, "Operation").def("cancel", &PyOperation::cancel);
  zarrcoro_python::register_pipeline(m, {[](nb::handle r) -> zarrcoro::Runtime& { return nb::cast<PyRuntime&>(r).engine->runtime(); }, python_exception});

  nb::class_<PyArray>(m, "Array")
      .def_static(
          "open",
          [](PyRuntime& r, const std::string& url, const std::string& path, nb::dict options) {
            auto store = r.engine->store(url, open_options(options));
            nb::gil_scoped_release release;
            return PyArray{r.engine, Array::open_blocking(r.engine->runtime(), std::move(store), path)};
          },
          "runtime"_a, "url"_a, "path"_a, "options"_a)
      .def_static(
          "create",
          [](PyRuntime& r, const std::string& url, const std::string& path, const std::string& document,
             const std::string& attributes, bool overwrite, nb::dict options) {
            const std::string key = path.empty() ? "" : path + "/";
            const nlohmann::json doc = parse(document, "metadata");
            zarrcoro::ArrayMetadata meta =
                doc.value("zarr_format", 3) == 2
                    ? zarrcoro::ArrayMetadata::from_v2_json(doc, parse(attributes, "attributes"), key + ".zarray")
                    : zarrcoro::ArrayMetadata::from_json(doc, key + "zarr.json");
            auto store = r.engine->store(url, open_options(options));
            nb::gil_scoped_release release;
            return PyArray{r.engine, Array::create_blocking(r.engine->runtime(), std::move(store), path, std::move(meta),
                                                            overwrite ? zarrcoro::CreateMode::overwrite
                                                                      : zarrcoro::CreateMode::fail_if_exists)};
          },
          "runtime"_a, "url"_a, "path"_a, "document"_a, "attributes"_a, "overwrite"_a, "options"_a)
      .def_prop_ro("shape", [](const PyArray& a) { return a.array.shape(); })
      .def_prop_ro("chunks", [](const PyArray& a) { return a.array.metadata().chunk_shape; })
      .def_prop_ro("path", [](const PyArray& a) { return a.array.path(); })
      .def_prop_ro("zarr_format", [](const PyArray& a) { return a.array.metadata().zarr_format; })
      .def_prop_ro("attributes", [](const PyArray& a) { return dump(a.array.metadata().attributes); })
      .def_prop_ro("metadata", [](const PyArray& a) {
        const auto& m = a.array.metadata();
        return dump(m.zarr_format == 2 ? m.to_v2_json(a.array.path()) : m.to_json());
      })
      .def_prop_ro("dtype_kind", [](const PyArray& a) {
        const auto k = a.array.dtype().kind();
        return k == zarrcoro::DataTypeKind::string ? "string" : k == zarrcoro::DataTypeKind::vlen_bytes ? "bytes" : "fixed";
      })
      .def_prop_ro("npy_descr", [](const PyArray& a) { return zarrcoro::npy_descr(a.array.dtype()); })
      .def_prop_ro("itemsize", [](const PyArray& a) { return a.array.dtype().size(); })
      .def_prop_ro("fill_value_bytes", [](const PyArray& a) {
        const auto& f = a.array.metadata().fill_value;
        return nb::bytes(reinterpret_cast<const char*>(f.data()), f.size());
      })
      .def(
          "read_into",
          [](PyArray& a, const Shape& start, const Shape& stop, Buffer out) {
            (void)a.engine->runtime();
            const Region r = region_of(start, stop);
            const auto span = bytes_of(out, region_bytes(a, r), "out");
            nb::gil_scoped_release release;
            a.array.read_blocking(r, span);
          },
          "start"_a, "stop"_a, "out"_a.noconvert())
      .def(
          "write",
          [](PyArray& a, const Shape& start, const Shape& stop, ConstBuffer in) {
            (void)a.engine->runtime();
            const Region r = region_of(start, stop);
            const auto span = bytes_of(in, region_bytes(a, r), "value");
            nb::gil_scoped_release release;
            a.array.write_blocking(r, span);
          },
          "start"_a, "stop"_a, "value"_a.noconvert())
      .def(
          "read_into_async",
          [](PyArray& a, const Shape& start, const Shape& stop, Buffer out, nb::object loop, nb::object future) {
            (void)a.engine->runtime();
            const Region r = region_of(start, stop);
            const auto span = bytes_of(out, region_bytes(a, r), "out");
            return start_async(a.engine, std::move(loop), std::move(future), nb::cast(out),
                               [&](auto handler) { a.array.async_read(r, span, std::move(handler)); });
          },
          "start"_a, "stop"_a, "out"_a.noconvert(), "loop"_a, "future"_a)
      .def(
          "write_async",
          [](PyArray& a, const Shape& start, const Shape& stop, ConstBuffer in, nb::object loop, nb::object future) {
            (void)a.engine->runtime();
            const Region r = region_of(start, stop);
            const auto span = bytes_of(in, region_bytes(a, r), "value");
            return start_async(a.engine, std::move(loop), std::move(future), nb::cast(in),
                               [&](auto handler) { a.array.async_write(r, span, std::move(handler)); });
          },
          "start"_a, "stop"_a, "value"_a.noconvert(), "loop"_a, "future"_a)
      .def(
          "read_strings",
          [](PyArray& a, const Shape& start, const Shape& stop) {
            (void)a.engine->runtime();
            std::vector<std::string> values;
            {
              nb::gil_scoped_release release;
              values = a.array.read_strings_blocking(region_of(start, stop));
            }
            return python_strings(is_text(a.array), values);
          },
          "start"_a, "stop"_a)
      .def(
          "read_strings_async",
          [](PyArray& a, const Shape& start, const Shape& stop, nb::object loop, nb::object future) {
            (void)a.engine->runtime();
            Region r = region_of(start, stop);
            return start_async(
                a.engine, std::move(loop), std::move(future), nb::none(),
                [&](auto handler) { a.array.async_read_strings(std::move(r), std::move(handler)); },
                [text = is_text(a.array)](const std::vector<std::string>& values) {
                  return python_strings(text, values);
                });
          },
          "start"_a, "stop"_a, "loop"_a, "future"_a)
      .def(
          "write_strings",
          [](PyArray& a, const Shape& start, const Shape& stop, nb::list items) {
            (void)a.engine->runtime();
            std::vector<std::string> values = engine_strings(items);
            nb::gil_scoped_release release;
            a.array.write_strings_blocking(region_of(start, stop), values);
          },
          "start"_a, "stop"_a, "values"_a)
      .def(
          "write_slabs",
          [](PyArray& a, Boxes starts, Boxes stops, ConstBuffer in) {
            (void)a.engine->runtime();
            SlabPlan plan = slab_plan(starts, stops, a.array.shape().size());
            const std::size_t each = static_cast<std::size_t>(plan.elements_each) * a.array.dtype().size();
            const auto span = bytes_of(in, each * plan.regions.size(), "value");
            nb::gil_scoped_release release;
            write_slabs_blocking(std::move(plan.regions), fixed_slab_writer(a.array, span, each));
          },
          "starts"_a, "stops"_a, "value"_a.noconvert())
      .def(
          "write_slabs_async",
          [](PyArray& a, Boxes starts, Boxes stops, ConstBuffer in, nb::object loop, nb::object future) {
            (void)a.engine->runtime();
            SlabPlan plan = slab_plan(starts, stops, a.array.shape().size());
            const std::size_t each = static_cast<std::size_t>(plan.elements_each) * a.array.dtype().size();
            const auto span = bytes_of(in, each * plan.regions.size(), "value");
            return start_async(a.engine, std::move(loop), std::move(future), nb::cast(in), [&](auto handler) {
              start_slabs(std::move(plan.regions), fixed_slab_writer(a.array, span, each), std::move(handler));
            });
          },
          "starts"_a, "stops"_a, "value"_a.noconvert(), "loop"_a, "future"_a)
      .def(
          "write_strings_slabs",
          [](PyArray& a, Boxes starts, Boxes stops, nb::list items) {
            (void)a.engine->runtime();
            SlabPlan plan = slab_plan(starts, stops, a.array.shape().size());
            auto values = std::make_shared<const std::vector<std::string>>(engine_strings(items));
            const std::size_t each = static_cast<std::size_t>(plan.elements_each);
            if (values->size() != each * plan.regions.size())
              throw zarrcoro::InvalidArgument("", "value", "the values do not fill the boxes");
            nb::gil_scoped_release release;
            write_slabs_blocking(std::move(plan.regions), string_slab_writer(a.array, values, each));
          },
          "starts"_a, "stops"_a, "values"_a)
      .def(
          "write_strings_slabs_async",
          [](PyArray& a, Boxes starts, Boxes stops, nb::list items, nb::object loop, nb::object future) {
            (void)a.engine->runtime();
            SlabPlan plan = slab_plan(starts, stops, a.array.shape().size());
            auto values = std::make_shared<const std::vector<std::string>>(engine_strings(items));
            const std::size_t each = static_cast<std::size_t>(plan.elements_each);
            if (values->size() != each * plan.regions.size())
              throw zarrcoro::InvalidArgument("", "value", "the values do not fill the boxes");
            return start_async(a.engine, std::move(loop), std::move(future), nb::none(), [&](auto handler) {
              start_slabs(std::move(plan.regions), string_slab_writer(a.array, values, each), std::move(handler));
            });
          },
          "starts"_a, "stops"_a, "values"_a, "loop"_a, "future"_a)
      .def(
          "set_attributes",
          [](PyArray& a, const std::string& attributes) {
            (void)a.engine->runtime();
            nlohmann::json j = parse(attributes, "attributes");
            nb::gil_scoped_release release;
            return PyArray{a.engine, a.array.set_attributes_blocking(std::move(j))};
          },
          "attributes"_a)
      .def(
          "resize",
          [](PyArray& a, const Shape& shape) {
            (void)a.engine->runtime();
            nb::gil_scoped_release release;
            return PyArray{a.engine, a.array.resize_blocking(shape)};
          },
          "shape"_a);

  nb::class_<PyGroup>(m, "Group")
      .def_static(
          "open",
          [](PyRuntime& r, const std::string& url, const std::string& path, nb::dict options,
             std::optional<bool> consolidated) {
            auto store = r.engine->store(url, open_options(options));
            const auto mode = !consolidated ? zarrcoro::Consolidated::use_if_present
                              : *consolidated ? zarrcoro::Consolidated::require
                                              : zarrcoro::Consolidated::ignore;
            nb::gil_scoped_release release;
            return PyGroup{r.engine, Group::open_blocking(r.engine->runtime(), std::move(store), path, mode)};
          },
          "runtime"_a, "url"_a, "path"_a, "options"_a, "consolidated"_a = nb::none())
      .def_static(
          "create",
          [](PyRuntime& r, const std::string& url, const std::string& path, const std::string& attributes,
             int zarr_format, bool overwrite, nb::dict options) {
            nlohmann::json attrs = parse(attributes, "attributes");
            auto store = r.engine->store(url, open_options(options));
            nb::gil_scoped_release release;
            return PyGroup{r.engine, Group::create_blocking(r.engine->runtime(), std::move(store), path, std::move(attrs),
                                                            zarr_format,
                                                            overwrite ? zarrcoro::CreateMode::overwrite
                                                                      : zarrcoro::CreateMode::fail_if_exists)};
          },
          "runtime"_a, "url"_a, "path"_a, "attributes"_a, "zarr_format"_a, "overwrite"_a, "options"_a)
      .def_prop_ro("path", [](const PyGroup& g) { return g.group.path(); })
      .def_prop_ro("zarr_format", [](const PyGroup& g) { return g.group.zarr_format(); })
      .def_prop_ro("attributes", [](const PyGroup& g) { return dump(g.group.attributes()); })
      .def_prop_ro("has_consolidated_metadata", [](const PyGroup& g) { return g.group.has_consolidated_metadata(); })
      .def(
          "members",
          [](PyGroup& g, bool recursive) {
            (void)g.engine->runtime();
            std::vector<zarrcoro::NodeEntry> entries;
            {
              nb::gil_scoped_release release;
              entries = g.group.members_blocking(recursive);
            }
            std::vector<std::tuple<std::string, std::string, int, bool>> out;
            for (const auto& e : entries)
              out.emplace_back(e.name, e.node_type == zarrcoro::NodeType::array ? "array" : "group", e.zarr_format,
                               e.implicit);
            return out;
          },
          "recursive"_a = false)
      .def(
          "open_array",
          [](PyGroup& g, const std::string& name) {
            (void)g.engine->runtime();
            nb::gil_scoped_release release;
            return PyArray{g.engine, g.group.open_array_blocking(name)};
          },
          "name"_a)
      .def(
          "open_group",
          [](PyGroup& g, const std::string& name) {
            (void)g.engine->runtime();
            nb::gil_scoped_release release;
            return PyGroup{g.engine, g.group.open_group_blocking(name)};
          },
          "name"_a)
      .def(
          "set_attributes",
          [](PyGroup& g, const std::string& attributes) {
            (void)g.engine->runtime();
            nlohmann::json j = parse(attributes, "attributes");
            nb::gil_scoped_release release;
            return PyGroup{g.engine, g.group.set_attributes_blocking(std::move(j))};
          },
          "attributes"_a);
}
