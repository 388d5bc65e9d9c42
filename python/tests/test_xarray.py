"""The xarray backend against datasets written by xarray's own to_zarr
(zarr-python 3, Zarr v2 and v3): the same Dataset as xarray's zarr engine
reads (values, dims, coords, attrs, masked fills), lazily, with group=,
consolidated metadata, Dask chunks and load_async; and the entry point name
"zarrcoro" as pyproject.toml declares it."""
import asyncio
import configparser

import numpy as np
import pytest

import zarrcoro
from zarrcoro.xarray_backend import ZarrcoroBackendEntrypoint

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")

ENGINE = ZarrcoroBackendEntrypoint
# to_zarr with zarr_format=3 consolidates and zarr-python warns that v3 has no consolidated metadata in its spec.
pytestmark = pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")


def sample_dataset():
    """Every kind of variable xarray writes: index coordinates (ints, floats,
    times), a non-index coordinate, floats with NaN (some chunks all NaN, so
    not stored), ints with a _FillValue, bools, strings, a 0-d variable, and
    attributes of every JSON kind."""
    x = np.arange(6, dtype="int64") * 10
    y = np.linspace(-1.0, 1.0, 5)
    temperature = np.arange(30, dtype="float32").reshape(6, 5) / 4
    temperature[0, 0] = np.nan
    temperature[4:, 3:] = np.nan  # the chunk (2, 1) of (2, 3)-chunks: all NaN, never stored
    count = (np.arange(30, dtype="int16").reshape(6, 5) % 7) - 1  # -1 is the _FillValue below
    ds = xr.Dataset(
        {
            "temperature": (("x", "y"), temperature, {"units": "K", "valid": [0, 100], "nested": {"a": [1, "b"]}}),
            "count": (("x", "y"), count, {"long_name": "a count"}),
            "flag": (("x",), np.array([True, False, True, True, False, False])),
            "label": (("x",), np.array(["a", "", "\u00e9t\u00e9", "d", "e", "f"], dtype=object)),
            "scalar": ((), np.float64(2.5), {"note": "0-d"}),
        },
        coords={
            "x": x,
            "y": y,
            "time": ("time", np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[ns]")),
            "lat": (("x", "y"), np.add.outer(x, y)),
        },
        attrs={"title": "sample", "version": 3, "ratio": 0.25, "flags": [1, 2, 3], "meta": {"k": None}},
    )
    ds["count"].encoding["_FillValue"] = -1
    for name in ("temperature", "count", "lat"):
        ds[name].encoding["chunks"] = (2, 3)
    return ds


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def written(request, tmp_path):
    path = tmp_path / ("ds%d.zarr" % request.param)
    sample_dataset().to_zarr(path, zarr_format=request.param, mode="w")
    return path, request.param


def test_reads_the_dataset_xarray_reads(written):
    path, fmt = written
    theirs = xr.open_zarr(path, zarr_format=fmt, chunks=None).load()
    ours = xr.open_dataset(path, engine=ENGINE)
    xr.testing.assert_identical(ours.load(), theirs)
    for name in theirs.variables:  # dtypes too (assert_identical compares values)
        assert ours[name].dtype == theirs[name].dtype, name
    # The masked fills, exactly: NaN where the data was NaN (stored or in a
    # chunk never written) or where count held its _FillValue.
    expected = sample_dataset()
    assert np.array_equal(np.isnan(ours.temperature.values), np.isnan(expected.temperature.values))
    assert np.array_equal(ours.temperature.values, expected.temperature.values, equal_nan=True)
    count = expected["count"].values
    assert np.array_equal(ours["count"].values, np.where(count == -1, np.nan, count), equal_nan=True)
    assert ours["count"].dtype == np.float32  # int16 with a _FillValue decodes to floats, as in xarray
    assert list(ours.label.values) == ["a", "", "\u00e9t\u00e9", "d", "e", "f"]
    assert ours.scalar.values == 2.5 and ours.scalar.dims == ()
    assert ours.temperature.dims == ("x", "y") and ours.flag.dims == ("x",)
    assert set(ours.coords) == {"x", "y", "time", "lat"}
    assert ours.attrs == {"title": "sample", "version": 3, "ratio": 0.25, "flags": [1, 2, 3], "meta": {"k": None}}
    assert ours.temperature.attrs == {"units": "K", "valid": [0, 100], "nested": {"a": [1, "b"]}}
    assert ours.time.values.tolist() == expected.time.values.tolist()
    assert ours.temperature.encoding["preferred_chunks"] == {"x": 2, "y": 3}


def test_dimension_names_come_from_the_format(written):
    path, fmt = written
    meta = zarrcoro.open_array(path, "temperature").metadata
    if fmt == 3:
        assert meta["dimension_names"] == ["x", "y"]
    else:
        assert zarrcoro.open_array(path, "temperature").attrs["_ARRAY_DIMENSIONS"] == ["x", "y"]
    assert "_ARRAY_DIMENSIONS" not in xr.open_dataset(path, engine=ENGINE).temperature.attrs


def test_opening_reads_no_data_until_it_is_loaded(written):
    path, _ = written
    with zarrcoro.Runtime(codec_threads=1) as rt:
        before = rt.stats()["chunks"]
        ds = xr.open_dataset(path, engine=ENGINE, runtime=rt)
        opened = rt.stats()["chunks"]
        # Only the index coordinates x, y and time (one chunk each; decoding
        # times reads the first and the last element before the whole).
        assert opened - before == 5
        assert not ds.temperature.variable._in_memory and not ds.lat.variable._in_memory
        part = ds.temperature[1:3, 0:2].values  # chunks (0, 0) and (1, 0)
        assert rt.stats()["chunks"] - opened == 2
        assert np.array_equal(part, sample_dataset().temperature.values[1:3, 0:2], equal_nan=True)
        picked = ds.lat.isel(x=[5, 0, 2], y=[4, 1]).values  # an outer indexer: read through its bounding box
        assert np.array_equal(picked, sample_dataset().lat.values[np.ix_([5, 0, 2], [4, 1])])
        points = ds.lat.isel(x=xr.DataArray([0, 5], dims="p"), y=xr.DataArray([1, 4], dims="p")).values
        assert np.array_equal(points, sample_dataset().lat.values[[0, 5], [1, 4]])


def test_group_and_consolidated_metadata(tmp_path):
    ds = sample_dataset()
    ds.to_zarr(tmp_path / "g.zarr", group="inner/deep", zarr_format=3, mode="w")  # consolidated by default
    ds.to_zarr(tmp_path / "plain.zarr", zarr_format=2, mode="w", consolidated=False)
    ours = xr.open_dataset(tmp_path / "g.zarr", engine=ENGINE, group="inner/deep", consolidated=True)
    xr.testing.assert_identical(ours.load(), xr.open_zarr(tmp_path / "g.zarr", group="inner/deep",
                                                          chunks=None).load())
    # zarr-python consolidates at the root: the group is found through it.
    assert zarrcoro.open_group(tmp_path / "g.zarr").has_consolidated_metadata
    assert not zarrcoro.open_group(tmp_path / "g.zarr", "inner/deep").has_consolidated_metadata
    xr.testing.assert_identical(xr.open_dataset(zarrcoro.open_group(tmp_path / "g.zarr"), engine=ENGINE,
                                                group="inner/deep").load(), ours.load())
    plain = xr.open_dataset(tmp_path / "plain.zarr", engine=ENGINE)
    xr.testing.assert_identical(plain.load(), xr.open_zarr(tmp_path / "plain.zarr", consolidated=False,
                                                           chunks=None).load())
    with pytest.raises(zarrcoro.NotFound):
        xr.open_dataset(tmp_path / "plain.zarr", engine=ENGINE, consolidated=True)
    with pytest.raises(zarrcoro.NotFound):
        xr.open_dataset(tmp_path / "g.zarr", engine=ENGINE, group="nothing")


def test_v3_fill_value_as_mask_when_asked(tmp_path):
    a = zarrcoro.create_array(tmp_path / "m", path="v", shape=(4,), chunks=(2,), dtype="int32", fill_value=7,
                              dimension_names=["i"])
    a[:2] = [1, 7]
    plain = xr.open_dataset(tmp_path / "m", engine=ENGINE)  # v3: xarray's default leaves the fill alone
    assert plain.v.dtype == np.int32 and plain.v.values.tolist() == [1, 7, 7, 7]
    assert plain.v.encoding["fill_value"] == 7
    masked = xr.open_dataset(tmp_path / "m", engine=ENGINE, use_zarr_fill_value_as_mask=True)
    assert np.array_equal(masked.v.values, [1.0, np.nan, np.nan, np.nan], equal_nan=True)
    zarrcoro.create_array(tmp_path / "n", path="w", shape=(2,), dtype="int8")  # no dimension_names
    with pytest.raises(KeyError, match="dimension_names"):
        xr.open_dataset(tmp_path / "n", engine=ENGINE)


def test_dask_chunks_and_load_async(written):
    path, _ = written
    expected = sample_dataset()
    lazy = xr.open_dataset(path, engine=ENGINE, chunks={})
    assert lazy.temperature.chunks == ((2, 2, 2), (3, 2))  # the arrays' chunks
    assert np.array_equal(lazy.temperature.values, expected.temperature.values, equal_nan=True)

    async def load():
        return await xr.open_dataset(path, engine=ENGINE).load_async()

    loaded = asyncio.run(load())
    xr.testing.assert_identical(loaded, xr.open_dataset(path, engine=ENGINE).load())


def test_the_engine_name_resolves_through_the_declared_entry_point(tmp_path, monkeypatch, written):
    """engine="zarrcoro" finds the backend through package metadata. An
    installed package has it (pip install ./python); in-tree, a dist-info
    made from pyproject.toml's [project.entry-points."xarray.backends"]
    stands in for the installation (what is tested: that declaration)."""
    import importlib.metadata
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    from xarray.backends import plugins

    path, fmt = written
    installed = any(ep.name == "zarrcoro" for ep in importlib.metadata.entry_points(group="xarray.backends"))
    if not installed:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        project = tomllib.loads(pyproject.read_text())["project"]
        declared = project["entry-points"]["xarray.backends"]
        assert declared == {"zarrcoro": "zarrcoro.xarray_backend:ZarrcoroBackendEntrypoint"}
        info = tmp_path / "site" / ("zarrcoro-%s.dist-info" % project["version"])
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zarrcoro\nVersion: %s\n" % project["version"])
        entry_points = configparser.ConfigParser()
        entry_points["xarray.backends"] = declared
        with open(info / "entry_points.txt", "w") as f:
            entry_points.write(f)
        monkeypatch.syspath_prepend(str(tmp_path / "site"))
    plugins.list_engines.cache_clear()
    try:
        assert isinstance(plugins.list_engines()["zarrcoro"], ZarrcoroBackendEntrypoint)
        ds = xr.open_dataset(path, engine="zarrcoro")
        xr.testing.assert_identical(ds.load(), xr.open_dataset(path, engine=ENGINE).load())
    finally:
        monkeypatch.undo()
        plugins.list_engines.cache_clear()
