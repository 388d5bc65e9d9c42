"""xarray backend: ``xr.open_dataset(path, engine="zarrcoro")``.

A Zarr group becomes a Dataset as xarray's own zarr engine makes it (the
conventions of https://docs.xarray.dev/en/stable/internals/zarr-encoding-spec.html),
read through zarrcoro's engine:

- each array directly in the group is a variable; its dimensions are v3
  ``dimension_names`` or the v2 attribute ``_ARRAY_DIMENSIONS`` (which is
  then left out of the attributes); coordinates come from CF decoding
  (dimension coordinates, the ``coordinates`` attribute) as with any
  backend;
- data is lazy: opening reads metadata only (one document when the group
  has consolidated metadata, which is used when present); a variable reads
  the boxes its indexers select, when they are loaded (BasicIndexer
  directly; OuterIndexer and VectorizedIndexer through the bounding box and
  NumPy, xarray's explicit_indexing_adapter). ``Dataset.load_async``
  awaits ``Array.read_async``;
- fill values as xarray's zarr engine reads them: with
  ``use_zarr_fill_value_as_mask`` (default: True for Zarr v2, False for v3,
  as in xarray) the array's fill_value becomes ``_FillValue`` so that CF
  decoding masks it; otherwise the fill_value goes to
  ``encoding["fill_value"]`` and a ``_FillValue`` attribute (written by
  xarray's ``to_zarr`` for v3, base64 for floats) is decoded and masks.

The entry point is registered as ``zarrcoro`` (pyproject.toml,
``[project.entry-points."xarray.backends"]``) for an installed package;
``engine=ZarrcoroBackendEntrypoint`` works without installation.
"""
import base64
import os
import struct

import numpy as np
from xarray.backends.common import AbstractDataStore, BackendArray, BackendEntrypoint
from xarray.backends.store import StoreBackendEntrypoint
from xarray.core import indexing
from xarray.core.variable import Variable

from . import Group, NotFound, open_group

DIMENSION_KEY = "_ARRAY_DIMENSIONS"

__all__ = ["ZarrcoroBackendArray", "ZarrcoroDataStore", "ZarrcoroBackendEntrypoint"]


class ZarrcoroBackendArray(BackendArray):
    """A zarrcoro Array as xarray's lazily indexed backend array: ``shape``
    and ``dtype`` of the Zarr array; indexing with an ExplicitIndexer reads
    the box it bounds. Pickles as what reopens the array (Dask workers).
    Thread-safe."""

    __slots__ = ("_array", "shape", "dtype")

    def __init__(self, array):
        self._array = array
        self.shape = array.shape
        self.dtype = array.dtype

    def get_array(self):
        """The zarrcoro Array."""
        return self._array

    def _wrap(self, value):
        # A 0-d selection gives a scalar (str, or a NumPy scalar): xarray wants an array.
        return value if isinstance(value, np.ndarray) else np.asarray(value, dtype=self.dtype)

    def __getitem__(self, key):
        """The NumPy array an ExplicitIndexer selects (a read of the box that
        bounds it; xarray indexes that for outer and vectorized indexers)."""
        return self._wrap(indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC,
                                                             self._array.__getitem__))

    async def async_getitem(self, key):
        """As __getitem__, awaited through Array.read_async."""
        return self._wrap(await indexing.async_explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.BASIC, self._array.read_async))


def _decode_fill_attribute(value, array):
    """A ``_FillValue`` attribute as xarray's to_zarr encodes it for Zarr v3
    (floats as the base64 of a little-endian double; complex as two)."""
    kind = array.dtype.kind
    if array._native.dtype_kind == "string":
        return str(value)
    if array._native.dtype_kind == "bytes":
        return base64.standard_b64decode(value)
    if kind == "f":
        return struct.unpack("<d", base64.standard_b64decode(value))[0] if isinstance(value, (str, bytes)) else value
    if kind == "c":
        real, imag = (struct.unpack("<d", base64.standard_b64decode(v))[0] for v in value)
        return complex(real, imag)
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    return value


def _dimensions_and_attributes(name, array):
    attributes = array.attrs
    if array.zarr_format == 3:
        dims = array.metadata.get("dimension_names")
        if dims is None and array.ndim == 0:
            dims = []
        if dims is None or len(dims) != array.ndim or any(d is None for d in dims):
            raise KeyError("Zarr array %r has no dimension_names for each of its %d dimensions, which xarray needs "
                           "as the variable's dimensions" % (name, array.ndim))
    else:
        try:
            dims = attributes.pop(DIMENSION_KEY)
        except KeyError:
            raise KeyError("Zarr array %r is missing the attribute %r, which xarray needs as the variable's "
                           "dimensions" % (name, DIMENSION_KEY)) from None
    return tuple(dims), attributes


class ZarrcoroDataStore(AbstractDataStore):
    """The arrays directly in a zarrcoro Group as xarray variables (read
    only). ``use_zarr_fill_value_as_mask``: None for xarray's default (True
    for v2, False for v3)."""

    def __init__(self, group, use_zarr_fill_value_as_mask=None):
        if not isinstance(group, Group):
            raise TypeError("ZarrcoroDataStore takes a zarrcoro.Group, got %s" % type(group).__name__)
        self.group = group
        if use_zarr_fill_value_as_mask is None:
            use_zarr_fill_value_as_mask = group.zarr_format == 2
        self._fill_as_mask = use_zarr_fill_value_as_mask

    def open_store_variable(self, name, array):
        """The lazy Variable of ``array`` (named ``name`` in errors)."""
        dims, attributes = _dimensions_and_attributes(name, array)
        encoding = {"chunks": array.chunks, "preferred_chunks": dict(zip(dims, array.chunks))}
        if array.dtype.kind == "T":
            encoding["dtype"] = array.dtype
        has_fill = array.metadata.get("fill_value") is not None  # v2 allows null: no fill value
        if self._fill_as_mask:
            if has_fill:
                attributes["_FillValue"] = array.fill_value
        else:
            if array.zarr_format == 3:
                encoding["fill_value"] = array.fill_value
            if "_FillValue" in attributes:
                attributes["_FillValue"] = _decode_fill_attribute(attributes["_FillValue"], array)
        data = indexing.LazilyIndexedArray(ZarrcoroBackendArray(array))
        return Variable(dims, data, attributes, encoding)

    def get_variables(self):
        """{name: Variable} for the arrays directly in the group."""
        return {name: self.open_store_variable(name, array) for name, array in self.group.arrays()}

    def get_attrs(self):
        """The group's attributes (but NCZarr's _nc*)."""
        return {k: v for k, v in self.group.attrs.items() if not k.lower().startswith("_nc")}

    def get_dimensions(self):
        """{dimension: size}; ValueError if arrays disagree on a size."""
        dimensions = {}
        for name, array in self.group.arrays():
            dims, _ = _dimensions_and_attributes(name, array)
            for d, n in zip(dims, array.shape):
                if dimensions.setdefault(d, n) != n:
                    raise ValueError("dimension %r has size %d in %r and %d elsewhere" % (d, n, name, dimensions[d]))
        return dimensions

    def close(self):
        """Nothing to release: arrays close when the last handle goes."""


def _open_group(url, path, storage_options, runtime, consolidated):
    """The group at ``path``, through the consolidated metadata of the root
    when it has some (zarr-python consolidates there, also for a group
    written below it), else through its own documents."""
    if path and consolidated is not False:
        try:
            root = open_group(url, "", mode="r", storage_options=storage_options, runtime=runtime,
                              consolidated=consolidated)
            if root.has_consolidated_metadata:
                return root._open(path, "group")
        except NotFound:
            pass
    return open_group(url, path, mode="r", storage_options=storage_options, runtime=runtime,
                      consolidated=consolidated)


class ZarrcoroBackendEntrypoint(BackendEntrypoint):
    """``xr.open_dataset(store, engine="zarrcoro", group=None, ...)``.

    ``store``: a path or URL (``file://``, ``http(s)://``, ``s3://`` with
    ``storage_options``, ``memory://``) or a zarrcoro Group (its runtime and
    consolidated metadata are used). ``group``: the group's path below it.
    ``consolidated``: None uses consolidated metadata when present (the
    root's, else the group's), True requires it, False ignores it.
    ``runtime``: the zarrcoro Runtime (default: the shared one). The CF decoding arguments
    are xarray's. Raises NotFound where there is no group, KeyError for an
    array without dimension names. Never guesses: pass ``engine``.
    """

    description = "Open Zarr v2/v3 groups with zarrcoro's C++ engine (lazy; asyncio through load_async)"

    def guess_can_open(self, filename_or_obj):
        """False: the engine is used when named, never guessed."""
        return False

    def open_dataset(self, filename_or_obj, *, mask_and_scale=True, decode_times=True, concat_characters=True,
                     decode_coords=True, drop_variables=None, use_cftime=None, decode_timedelta=None, group=None,
                     consolidated=None, storage_options=None, use_zarr_fill_value_as_mask=None, runtime=None):
        """The Dataset of the group (see the class); thread-safe, lazy."""
        path = (group or "").strip("/")
        if isinstance(filename_or_obj, Group):
            zgroup = filename_or_obj._open(path, "group") if path else filename_or_obj
        elif isinstance(filename_or_obj, (str, os.PathLike)):
            zgroup = _open_group(os.fspath(filename_or_obj), path, storage_options, runtime, consolidated)
        else:
            raise TypeError("engine='zarrcoro' opens a path, a URL or a zarrcoro.Group, got %s"
                            % type(filename_or_obj).__name__)
        store = ZarrcoroDataStore(zgroup, use_zarr_fill_value_as_mask)
        return StoreBackendEntrypoint().open_dataset(
            store, mask_and_scale=mask_and_scale, decode_times=decode_times, concat_characters=concat_characters,
            decode_coords=decode_coords, drop_variables=drop_variables, use_cftime=use_cftime,
            decode_timedelta=decode_timedelta)
