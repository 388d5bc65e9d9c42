"""NumPy basic indexing on top of the engine's boxes.

The engine reads and writes boxes [start, stop). A basic index (integers,
slices with any step, Ellipsis) becomes the box that bounds it, plus the
NumPy index that picks the selection out of that box and the axes that
integers drop. A write through a slice with a step other than 1 and -1
becomes slabs: one box per selected index along each such axis, so that
no element between the selected ones is written.
"""
import operator

import numpy as np

from .errors import InvalidIndex

# The local indices normalize gives a slice: the whole box, nothing, or a step.
_WHOLE = slice(None, None, 1)
_NOTHING = slice(0, 0)


def normalize(key, shape):
    """(start, stop, local index, result shape) for ``key`` on ``shape``.

    Raises InvalidIndex (an IndexError) for out-of-range integers, too many
    indices or anything other than basic indexing.
    """
    if not isinstance(key, tuple):
        key = (key,)
    ellipses = [i for i, k in enumerate(key) if k is Ellipsis]  # by identity: arrays compare elementwise
    if len(ellipses) > 1:
        raise InvalidIndex("an index can only have a single ellipsis ('...')")
    if ellipses:
        at = ellipses[0]
        key = key[:at] + (slice(None),) * (len(shape) - len(key) + 1) + key[at + 1:]
    if len(key) > len(shape):
        raise InvalidIndex("too many indices for array: array is %d-dimensional, but %d were indexed"
                           % (len(shape), len(key)))
    key = key + (slice(None),) * (len(shape) - len(key))
    start, stop, local, out_shape = [], [], [], []
    for k, n in zip(key, shape):
        if isinstance(k, slice):
            try:
                first, last, step = k.indices(n)
            except (TypeError, ValueError) as e:  # bounds that are not integers, step 0
                raise InvalidIndex("invalid slice %r: %s" % (k, e)) from None
            count = (last - first if last > first else 0) if step == 1 else len(range(first, last, step))
            if count == 0:
                start.append(0)
                stop.append(0)
                local.append(_NOTHING)
            elif step == 1:
                start.append(first)
                stop.append(last)
                local.append(_WHOLE)
            elif step > 0:
                hi = first + (count - 1) * step + 1
                start.append(first)
                stop.append(hi)
                local.append(slice(None, None, step))
            else:
                lo = first + (count - 1) * step
                start.append(lo)
                stop.append(first + 1)
                local.append(slice(None, None, step))
            out_shape.append(count)
        else:
            if isinstance(k, (bool, np.bool_)):
                raise InvalidIndex("boolean indices are not basic indexing, got %r" % (k,))
            try:
                i = operator.index(k)
            except TypeError:
                raise InvalidIndex("only integers, slices and Ellipsis are valid indices, got %r" % (k,)) from None
            if not -n <= i < n:
                raise InvalidIndex("index %d is out of bounds for an axis of size %d" % (i, n))
            i %= n
            start.append(i)
            stop.append(i + 1)
            local.append(0)
    return start, stop, tuple(local), tuple(out_shape)


def is_contiguous(local):
    """True when the selection is its whole box (no steps): `local` from normalize."""
    for s in local:
        if s is not _WHOLE and s is not _NOTHING and s.__class__ is slice:
            return False
    return True


def write_layout(start, stop, local):
    """How a write lands: (counts, stepped, starts, stops).

    ``counts``: per axis of the array, the elements written (1 for an
    integer), in which shape the data is laid out in ascending index order.
    ``stepped``: the axes whose slice step is not 1 or -1 and which select
    more than one index. Without such axes, ``starts`` and ``stops`` are
    None (one box: [start, stop)); with them, they are n x rank uint64
    arrays of slabs, one per combination of indices along the stepped axes
    in C order, each holding the elements ``np.moveaxis(data, stepped,
    range(len(stepped)))`` lays out consecutively.
    """
    counts, steps = [], []
    for a, b, s in zip(start, stop, local):
        step = abs(s.step or 1) if isinstance(s, slice) else 1
        counts.append(0 if b == a else (b - a - 1) // step + 1)
        steps.append(step)
    stepped = [i for i, (c, st) in enumerate(zip(counts, steps)) if st > 1 and c > 1]
    if not stepped:
        return tuple(counts), stepped, None, None
    grids = np.meshgrid(*[start[i] + np.arange(counts[i], dtype=np.uint64) * steps[i] for i in stepped],
                        indexing="ij")
    n = grids[0].size
    starts = np.tile(np.asarray(start, dtype=np.uint64), (n, 1))
    stops = np.tile(np.asarray(stop, dtype=np.uint64), (n, 1))
    for axis, grid in zip(stepped, grids):
        starts[:, axis] = grid.reshape(-1)
        stops[:, axis] = grid.reshape(-1) + 1
    return tuple(counts), stepped, starts, stops
