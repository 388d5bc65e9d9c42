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


def pytest_terminal_summary(terminalreporter):
    import zarrcoro

    stats = zarrcoro.default_runtime().stats()
    terminalreporter.write_sep("-", "zarrcoro engine")
    terminalreporter.write_line(
        f"pool submissions {stats['pool_submissions']}, chunks {stats['chunks']}, "
        f"codec calls {stats['codec_calls']} (on an I/O thread: {stats['codec_calls_on_io_thread']})")
    for reason, n in _fallbacks.reasons.most_common(15):
        terminalreporter.write_line(f"{n:6d}  {reason}")
