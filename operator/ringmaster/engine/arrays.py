"""The engine's array functions, fast at both ends: one plan and a million configurations.

One plan evaluates the model on scalars and arrays of a few elements, where numpy's cost is its
per-call overhead (about a microsecond a call, several for ``np.where``): :func:`as_f64` gives
numpy scalars for scalars (their arithmetic costs a tenth of a 0-d array's), :func:`where`
chooses in Python when the condition is one value, :func:`joint_shape` avoids
``np.broadcast_shapes`` in the common cases.

A sweep makes a few hundred elementwise passes over its inputs. Over a million configurations
each pass allocates, faults in and streams tens of MB, so memory, not arithmetic, sets the pace:
:func:`in_blocks` evaluates 32K configurations at a time, so the temporaries stay in cache and
malloc reuses the same blocks (1.3 to 1.6x the throughput on the 2-core machine of
docs/performance.md, for a few hundred Python calls more per million configurations).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

# Configurations per block: 32K float64 are 256 KiB per temporary (x3 for the bucket sizes of
# the overlap timeline), about the L2 cache of the Xeon of docs/performance.md. Measured there:
# blocks of 16K to 64K are equally fast, 4K pays its Python calls, 256K its memory traffic.
BLOCK = 32768

R = TypeVar("R")
P = ParamSpec("P")
F64 = NDArray[np.float64]


def as_f64(x: ArrayLike) -> F64:
    """``x`` as float64: an array, or for one value a numpy scalar (typed as an array, which it
    behaves as: arithmetic, ``shape``, ``ndim``, ``any``)."""
    a = np.asarray(x, dtype=np.float64)
    return a[()] if a.ndim == 0 else a


def where(condition: ArrayLike, a: ArrayLike, b: ArrayLike) -> NDArray[Any]:
    """``np.where(condition, a, b)``; with a single condition, the chosen operand as it is
    (unbroadcast, its own dtype, a numpy scalar for a Python number), at a tenth of the cost."""
    if isinstance(condition, np.ndarray) and condition.ndim:
        return np.where(condition, a, b)
    return _scalar(a if condition else b)  # type: ignore[no-any-return]


def maximum(a: ArrayLike, b: ArrayLike) -> NDArray[Any]:
    """``np.maximum(a, b)``; for two single values, compared in Python (a quarter of the cost),
    NaN propagating as numpy's does."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return _scalar(a if a != a or a >= b else b)  # type: ignore[operator,no-any-return]


def minimum(a: ArrayLike, b: ArrayLike) -> NDArray[Any]:
    """``np.minimum(a, b)``; for two single values, compared in Python, NaN propagating."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return _scalar(a if a != a or a <= b else b)  # type: ignore[operator,no-any-return]


# Python numbers as the numpy scalars numpy returns, so results have a shape and a dtype.
_NUMPY_SCALAR: dict[type, Callable[[Any], Any]] = {float: np.float64, int: np.int64, bool: np.bool_}


def _scalar(x: Any) -> Any:
    convert = _NUMPY_SCALAR.get(type(x))
    return x if convert is None else convert(x)


def joint_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """``np.broadcast_shapes``, without its cost when the shapes are equal or all but one are
    scalars' (a single plan calls it a few times on tiny arrays, where it dominated)."""
    distinct = {s for s in shapes if s}
    if len(distinct) <= 1:
        return distinct.pop() if distinct else ()
    return np.broadcast_shapes(*shapes)


def in_blocks(fn: Callable[..., R], block: int = BLOCK, **arrays: Any) -> R:
    """``fn(**arrays)``, evaluated block by block when the broadcast shape of the array
    arguments has more than two blocks of elements; otherwise called once, unchanged.

    Array arguments (numpy arrays, not scalars or other objects) are broadcast together,
    flattened and sliced; other arguments pass as they are. ``fn`` must work elementwise over
    the configurations and return an array, or a tuple / NamedTuple nesting arrays; each result
    array takes the broadcast shape."""
    names = [k for k, v in arrays.items() if isinstance(v, np.ndarray) and v.ndim > 0]
    if not names:
        return fn(**arrays)
    shape = np.broadcast(*(arrays[k] for k in names)).shape
    size = int(np.prod(shape))
    if size <= 2 * block:
        return fn(**arrays)
    flat = {k: np.broadcast_to(arrays[k], shape).reshape(-1) for k in names}
    out: Any = None
    for start in range(0, size, block):
        part = {k: v[start : start + block] for k, v in flat.items()}
        result = fn(**{**arrays, **part})
        if out is None:
            out = _allocate(result, size)
        _store(out, result, slice(start, start + len(next(iter(part.values())))))
    return _reshape(out, shape)  # type: ignore[no-any-return]


def blocked(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` (keyword arguments only) evaluated :func:`in_blocks`; ``fn.__wrapped__`` is the
    function itself."""

    @functools.wraps(fn)
    def evaluate(*args: P.args, **kwargs: P.kwargs) -> R:
        if args:
            raise TypeError(f"{fn.__name__} takes keyword arguments only")
        return in_blocks(fn, **kwargs)  # type: ignore[arg-type]  # (block is never passed)

    return evaluate


def _allocate(result: Any, size: int) -> Any:
    if isinstance(result, tuple):
        parts = [_allocate(r, size) for r in result]
        return type(result)(*parts) if hasattr(result, "_fields") else tuple(parts)
    return np.empty(size, dtype=np.asarray(result).dtype)


def _store(out: Any, result: Any, where: slice) -> None:
    if isinstance(result, tuple):
        for o, r in zip(out, result, strict=True):
            _store(o, r, where)
        return
    out[where] = result  # a 0-d result (the same for every configuration) broadcasts


def _reshape(out: Any, shape: tuple[int, ...]) -> Any:
    if isinstance(out, tuple):
        parts = [_reshape(o, shape) for o in out]
        return type(out)(*parts) if hasattr(out, "_fields") else tuple(parts)
    return out.reshape(shape)
