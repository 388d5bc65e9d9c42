"""The engines perf/peers times, behind one small interface.

- zarrcoro's C++ engine (blocking API) and the raw and codec-only limits run
  in build/perf/zarrcoro_peers, one process for the whole run, which reads
  JSON commands on stdin and times them itself (see its source's header);
- zarrcoro's Python binding, TensorStore and zarr-python 3 (its default
  BatchedCodecPipeline, its FusedCodecPipeline, zarrs-python's
  ZarrsCodecPipeline in strict mode, i.e. zarrs, zarrcoro's own codec
  pipeline, and the no-hop baseline of direct_pipeline.py) run in this process, each
  with its defaults except TensorStore's file_io_sync, turned off so that it
  does not fsync each chunk as no other engine does.

Every engine's `run(workload, target, check)` returns (seconds, cpu_seconds,
data): the wall-clock time of the operation alone (arrays are opened before,
and a Python engine's result is freed after the clock stops), the CPU time
its process spent meanwhile (all threads), and, when `check` is set, what
it read, flat or in shape, for the driver to compare.
"""
import concurrent.futures
import dataclasses
import json
import os
import resource
import subprocess
import time

import numpy as np

from workloads import box_slices


class NotAvailable(Exception):
    """The engine cannot do this workload; the message says why."""


class Engine:
    key = ""      # a short name for directories and the JSON records
    label = ""    # the table's column
    role = "peer"  # "zarrcoro", "peer", "baseline" (checked, never a peer) or "limit"
    ratio_label = ""  # a zarrcoro engine's ratio column: "<ratio_label>/peer"
    unavailable = None  # why the engine cannot run at all (e.g. it does not import)

    def run(self, w, target=None, check=False):
        raise NotImplementedError

    def close(self):
        pass


# ---- engines in this process -----------------------------------------------------------------

class PythonEngine(Engine):
    """What the engines driven from Python share: handles opened once per
    path, and the operations built from read_all / write_all / read_box."""

    def __init__(self):
        self._handles = {}
        self._memory = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(8)

    # The primitives each engine supplies.
    def open(self, path, shared):
        raise NotImplementedError

    def read_all(self, h):
        raise NotImplementedError

    def write_all(self, h, data):
        raise NotImplementedError

    def read_box(self, h, slices):
        raise NotImplementedError

    def create_in_memory(self, shared):
        raise NotImplementedError

    def context(self):
        """A context manager around every operation (zarr-python's config)."""
        return _NoContext()

    def handle(self, path, shared):
        if path not in self._handles:
            with self.context():
                self._handles[path] = self.open(path, shared)
        return self._handles[path]

    def run(self, w, target=None, check=False):
        shared = w.array
        out = None
        with self.context():
            if w.op == "read":
                h = self.handle(shared.path, shared)
                with Stopwatch() as t:
                    out = self.read_all(h)
            elif w.op == "write":
                h = self.handle(target, shared)
                with Stopwatch() as t:
                    self.write_all(h, shared.data)
            elif w.op == "round_trip":
                src, dst = self.handle(shared.path, shared), self.handle(target, shared)
                with Stopwatch() as t:
                    self.write_all(dst, self.read_all(src))
            elif w.op == "regions":
                h = self.handle(shared.path, shared)
                t, out = self._regions(h, w.regions, w.threads, check)
            elif w.op == "mem_write":
                h = self.create_in_memory(shared)
                with Stopwatch() as t:
                    self.write_all(h, shared.data)
                self._memory[shared.name] = h
            elif w.op == "mem_read":
                if shared.name not in self._memory:  # written first, untimed
                    self.run(dataclasses.replace(w, op="mem_write"))
                h = self._memory[shared.name]
                with Stopwatch() as t:
                    out = self.read_all(h)
            else:
                raise ValueError("unknown op " + w.op)
        return t.seconds, t.cpu_seconds, out

    def _regions(self, h, regions, threads, keep):
        boxes = [box_slices(r) for r in regions]
        out = [None] * len(boxes)

        def worker(first):
            for i in range(first, len(boxes), threads):
                part = self.read_box(h, boxes[i])
                if keep:
                    out[i] = part

        with Stopwatch() as t:
            if threads == 1:
                worker(0)
            else:
                list(self._pool.map(worker, range(threads)))
        return t, np.concatenate([p.ravel() for p in out]) if keep else None

    def close(self):
        self._pool.shutdown()


class Stopwatch:
    """The wall-clock time of a `with` block, and the CPU time (user + system)
    of the whole process in it: every thread, the engine's own included."""

    def __enter__(self):
        self._cpu = _cpu()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self._t0
        self.cpu_seconds = _cpu() - self._cpu
        return False


def _cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class _NoContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class TensorStoreEngine(PythonEngine):
    key, label = "tensorstore", "tensorstore"

    def __init__(self):
        super().__init__()
        import tensorstore as ts
        self.ts = ts
        self.ctx = ts.Context({"file_io_sync": False})

    @staticmethod
    def driver(shared):
        return "zarr3" if shared.zarr_format == 3 else "zarr"

    def open(self, path, shared):
        spec = {"driver": self.driver(shared), "kvstore": {"driver": "file", "path": path}}
        return self.ts.open(spec, context=self.ctx, open=True).result()

    def read_all(self, h):
        return h.read().result()

    def write_all(self, h, data):
        h.write(data).result()

    def read_box(self, h, slices):
        return h[slices].read().result()

    def create_in_memory(self, shared):
        meta = dict(shared.metadata_doc)
        for k in ("node_type", "attributes", "storage_transformers", "zarr_format"):
            meta.pop(k, None)
        spec = {"driver": self.driver(shared), "kvstore": {"driver": "memory"}, "metadata": meta}
        return self.ts.open(spec, context=self.ts.Context(), create=True, delete_existing=True).result()


class ZarrPythonEngine(PythonEngine):
    """zarr-python 3 with a codec pipeline chosen by its config."""

    def __init__(self, key, label, pipeline, extra=None, role="peer", ratio_label=""):
        super().__init__()
        import zarr
        self.zarr = zarr
        self.key, self.label, self.role, self.ratio_label = key, label, role, ratio_label
        self.pipeline = pipeline
        self.config = {"codec_pipeline.path": pipeline, **(extra or {})}
        self.version = zarr.__version__
        module, _, cls = pipeline.rpartition(".")
        try:
            getattr(__import__(module, fromlist=[cls]), cls)
        except (ImportError, AttributeError) as e:
            self.unavailable = "%s does not import with zarr-python %s (%s)" % (pipeline, zarr.__version__, e)

    def context(self):
        return self.zarr.config.set(self.config)

    def _checked(self, a):
        """The array, if zarr-python really runs the pipeline asked for (it
        falls back to its own for stores a pipeline does not take)."""
        got, wanted = type(a.async_array.codec_pipeline).__name__, self.pipeline.rpartition(".")[2]
        if got != wanted:
            raise NotAvailable("zarr-python runs its %s for this store, not %s" % (got, wanted))
        return a

    def open(self, path, shared):
        from zarr.storage import LocalStore
        return self._checked(self.zarr.open_array(LocalStore(path), mode="r+"))

    def read_all(self, h):
        return h[...]

    def write_all(self, h, data):
        h[...] = data

    def read_box(self, h, slices):
        return h[slices]

    def create_in_memory(self, shared):
        from zarr.core.buffer import default_buffer_prototype
        from zarr.storage import MemoryStore
        name = "zarr.json" if shared.zarr_format == 3 else ".zarray"
        doc = default_buffer_prototype().buffer.from_bytes(json.dumps(shared.metadata_doc).encode())
        return self._checked(self.zarr.open_array(MemoryStore({name: doc}), mode="r+"))


class ZarrcoroPythonEngine(PythonEngine):
    """zarrcoro's Python binding (python/), with its default runtime."""
    key, label, role, ratio_label = "zarrcoro-python", "zc python", "zarrcoro", "py"

    def __init__(self):
        super().__init__()
        try:
            import zarrcoro
        except ImportError as e:
            self.unavailable = "the zarrcoro Python package does not import: %s" % e
            self.version = None
            return
        self.zarrcoro = zarrcoro
        self.version = os.path.dirname(zarrcoro.__file__)

    def open(self, path, shared):
        return self.zarrcoro.open_array(path)

    def read_all(self, h):
        return h[...]

    def write_all(self, h, data):
        h[...] = data

    def read_box(self, h, slices):
        return h[slices]

    def create_in_memory(self, shared):
        # create_array's zstd is level 3, which is libzstd's level 0 (zarr-python's v2 default) too.
        return self.zarrcoro.create_array("memory://peers-" + shared.name, shape=shared.data.shape,
                                          dtype=shared.data.dtype, chunks=shared.chunks, shards=shared.shards,
                                          compressor=None if shared.compressor == "none" else "zstd",
                                          zarr_format=shared.zarr_format, overwrite=True)


# ---- the C++ program: zarrcoro's engine and the limits -------------------------------------------------

class CppProgram:
    """build/perf/zarrcoro_peers, one process, one command at a time."""

    def __init__(self, exe, scratch, args=()):
        self.scratch = scratch
        self.proc = subprocess.Popen([exe, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        hello = json.loads(self.proc.stdout.readline())
        self.hardware_threads = hello["hardware_threads"]

    def call(self, cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("zarrcoro_peers ended (exit status %s)" % self.proc.poll())
        answer = json.loads(line)
        if "na" in answer:
            raise NotAvailable(answer["na"])
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["seconds"], answer["cpu_seconds"]

    def call_dump(self, cmd, dtype, check):
        """Runs cmd: (seconds, cpu seconds, data); with `check`, it dumps what it
        read, and `data` is that."""
        if not check:
            return (*self.call(cmd), None)
        dump = os.path.join(self.scratch, "dump.bin")
        seconds, cpu = self.call(dict(cmd, dump=dump))
        data = np.fromfile(dump, dtype=dtype)
        os.unlink(dump)
        return seconds, cpu, data

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.write('{"op": "quit"}\n')
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


class ZarrcoroCppEngine(Engine):
    """zarrcoro's C++ engine: Array::*_blocking on one Runtime (defaults)."""
    key, label, role, ratio_label = "zarrcoro", "zarrcoro", "zarrcoro", "C++"

    def __init__(self, program):
        self.p = program
        self.in_memory = set()

    def run(self, w, target=None, check=False):
        a = w.array
        if w.op == "read":
            return self.p.call_dump({"op": "read", "array": a.path}, a.data.dtype, check)
        if w.op == "write":
            return (*self.p.call({"op": "write", "array": target, "source": a.source}), None)
        if w.op == "round_trip":
            return (*self.p.call({"op": "round_trip", "src": a.path, "dst": target}), None)
        if w.op == "regions":
            return self.p.call_dump({"op": "regions", "array": a.path, "regions": w.regions, "threads": w.threads},
                                    a.data.dtype, check)
        if w.op == "mem_write":
            timing = self.p.call({"op": "mem_write", "name": a.name, "meta": a.metadata_doc, "source": a.source})
            self.in_memory.add(a.name)
            return (*timing, None)
        if w.op == "mem_read":
            if a.name not in self.in_memory:  # written first, untimed
                self.run(dataclasses.replace(w, op="mem_write"))
            return self.p.call_dump({"op": "mem_read", "name": a.name}, a.data.dtype, check)
        raise ValueError("unknown op " + w.op)


class LimitEngine(Engine):
    """The raw and codec-only limits, on the shared array's stored files:
    `raw` is the file system alone (open + pread + close to read; open(temp)
    + write + close + rename to write; memcpy for a memory store), `codec`
    libzstd alone on the stored chunks, in memory. Each on as many threads
    as the machine has cores (for one chunk per call, as many as the
    workload's callers: one chunk's work cannot be split)."""
    role = "limit"

    def __init__(self, program, kind):
        self.p = program
        self.kind = kind
        self.key = "limit-" + kind
        self.label = "raw" if kind == "raw" else "codec"

    def run(self, w, target=None, check=False):
        path = w.array.path
        cores = self.p.hardware_threads
        read = {"op": self.kind + "_read", "array": path, "threads": cores}
        write = ({"op": "raw_write", "array": path, "dst": target, "threads": cores} if self.kind == "raw"
                 else {"op": "codec_write", "array": path, "threads": cores})
        memory = {"op": "memcpy", "array": path, "threads": cores}
        if w.op == "read":
            cmd = read
        elif w.op == "write":
            cmd = write
        elif w.op == "round_trip":
            cmd = {"op": "seq", "ops": [read, write]}
        elif w.op == "regions":
            cmd = {"op": self.kind + "_regions", "array": path, "regions": w.regions,
                   "threads": w.limit_threads or cores}
        elif w.op in ("mem_read", "mem_write"):
            cmd = memory if self.kind == "raw" else (read if w.op == "mem_read" else write)
        else:
            raise ValueError("unknown op " + w.op)
        return (*self.p.call(cmd), None)
