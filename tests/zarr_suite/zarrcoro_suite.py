"""pytest plugin (``-p zarrcoro_suite``): runs zarr-python's test suite with
zarrcoro's codec pipeline selected for the whole session, as zarrs-python
does. The environment variable survives the ``config.reset()`` of zarr's
autouse fixture (donfig re-reads ZARR_* on refresh); tests that set a
pipeline themselves (``zarr.config.set({"codec_pipeline.path": ...})``)
still get theirs."""
import os

PIPELINE = "zarrcoro.pipeline.CodecPipeline"
os.environ["ZARR_CODEC_PIPELINE__PATH"] = PIPELINE


def pytest_configure(config):
    import zarr
    import zarrcoro.pipeline  # noqa: F401  (registers the pipeline with zarr)
    from zarr.registry import get_pipeline_class

    zarr.config.refresh()
    assert zarr.config.get("codec_pipeline.path") == PIPELINE
    assert get_pipeline_class() is zarrcoro.pipeline.CodecPipeline


def pytest_report_header(config):
    import zarr

    return f"zarrcoro_suite: codec_pipeline.path = {zarr.config.get('codec_pipeline.path')}"
