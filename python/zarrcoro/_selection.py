"""NumPy basic indexing on top of the engine's boxes.

The engine reads and writes boxes [start, stop). A basic index (integers,
slices with any step, Ellipsis) becomes the box that bounds it, plus the
NumPy index that picks the selection out of that box and the axes that
integers drop.
"""
import operator


def normalize(key, shape):
    """(start, stop, local index, result shape) for ``key`` on ``shape``.

    Raises IndexError for out-of-range integers, too many indices or
    anything other than basic indexing.
    """
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - len(key) + 1) + key[at + 1:]
    if len(key) > len(shape):
        raise IndexError("too many indices for array: array is %d-dimensional, but %d were indexed"
                         % (len(shape), len(key)))
    key = key + (slice(None),) * (len(shape) - len(key))
    start, stop, local, out_shape = [], [], [], []
    for k, n in zip(key, shape):
        if isinstance(k, slice):
            first, last, step = k.indices(n)
            count = len(range(first, last, step))
            if count == 0:
                start.append(0)
                stop.append(0)
                local.append(slice(0, 0))
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
            try:
                i = operator.index(k)
            except TypeError:
                raise IndexError("only integers, slices and Ellipsis are valid indices, got %r" % (k,)) from None
            if not -n <= i < n:
                raise IndexError("index %d is out of bounds for an axis of size %d" % (i, n))
            i %= n
            start.append(i)
            stop.append(i + 1)
            local.append(0)
    return start, stop, tuple(local), tuple(out_shape)


def is_contiguous(local):
    """True when the selection is its whole box (no steps)."""
    return all(s == 0 or s == slice(None, None, 1) or s == slice(None, None, None) or s == slice(0, 0)
               for s in local)
