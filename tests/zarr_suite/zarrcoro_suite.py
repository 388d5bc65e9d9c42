"""pytest plugin (``-p zarrcoro_suite``): runs zarr-python's test suite with
zarrcoro's codec pipeline selected for the whole session, as zarrs-python
does. The environment variable survives the ``config.reset()`` of zarr's
autouse fixture (donfig re-reads ZARR_* on refresh); tests that set a
pipeline themselves (``zarr.config.set({"codec_pipeline.path": ...})``)
still get theirs. The summary at the end says how much went through the
engine: its counters, and the fallbacks the pipeline logged by reason."""
import collections
import logging
import os
import re

import pytest

PIPELINE = "zarrcoro.pipeline.CodecPipeline"
os.environ["ZARR_CODEC_PIPELINE__PATH"] = PIPELINE


class _Fallbacks(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.reasons = collections.Counter()

    def emit(self, record):
        message = record.getMessage()
        reason = message.split(": ", 2)[-1]
        # One line per kind: numbers, keys and data type details left out.
        reason = re.sub(r"'[^']*'|\d+", "#", reason)[:90]
        kind = "array falls back" if "falls back" in message else "call rerun by zarr-python"
        self.reasons[f"{kind}: {reason}"] += 1


_fallbacks = _Fallbacks()


def pytest_configure(config):
    import zarr
    import zarrcoro.pipeline  # noqa: F401  (registers the pipeline with zarr)
    from zarr.registry import get_pipeline_class

    zarr.config.refresh()
    assert zarr.config.get("codec_pipeline.path") == PIPELINE
    assert get_pipeline_class() is zarrcoro.pipeline.CodecPipeline
    logger = logging.getLogger("zarrcoro.pipeline")
    logger.addHandler(_fallbacks)
    logger.setLevel(logging.INFO)


def pytest_report_header(config):
    import zarr

    return f"zarrcoro_suite: codec_pipeline.path = {zarr.config.get('codec_pipeline.path')}"


_STATS = ("pool_submissions", "chunks", "codec_calls", "codec_calls_on_io_thread")
# What the pytest-xdist workers reported (their own engines and fallbacks).
_workers = {"stats": collections.Counter(), "reasons": collections.Counter()}


def _own_stats():
    import zarrcoro

    stats = zarrcoro.default_runtime().stats()
    return {name: stats[name] for name in _STATS}


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the counts to the controller
        workeroutput["zarrcoro_stats"] = _own_stats()
        workeroutput["zarrcoro_reasons"] = dict(_fallbacks.reasons)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", {})
    _workers["stats"].update(output.get("zarrcoro_stats", {}))
    _workers["reasons"].update(output.get("zarrcoro_reasons", {}))


def pytest_terminal_summary(terminalreporter):
    stats = collections.Counter(_own_stats()) + _workers["stats"]
    reasons = _fallbacks.reasons + _workers["reasons"]
    terminalreporter.write_sep("-", "zarrcoro engine")
    terminalreporter.write_line(
        f"pool submissions {stats['pool_submissions']}, chunks {stats['chunks']}, "
        f"codec calls {stats['codec_calls']} (on an I/O thread: {stats['codec_calls_on_io_thread']})")
    for reason, n in reasons.most_common(15):
        terminalreporter.write_line(f"{n:6d}  {reason}")
