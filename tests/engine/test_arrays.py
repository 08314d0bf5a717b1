"""engine.arrays: the fast paths give numpy's answers; a blocked sweep equals an unblocked one."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ringmaster.engine import arrays as A
from ringmaster.engine.training import TrainingInputs, gpu_training, predict_training

unblocked = gpu_training.__wrapped__  # type: ignore[attr-defined]


def test_as_f64_gives_numpy_scalars_for_one_value_and_arrays_otherwise() -> None:
    one = A.as_f64(3)
    assert isinstance(one, np.float64) and one == 3.0 and one.shape == ()
    many = A.as_f64([1, 2])
    assert isinstance(many, np.ndarray) and many.dtype == np.float64


VALUES = [0, 1, 2.5, -1.0, math.inf, -math.inf, np.float64(7.0), np.int64(3), True]


@pytest.mark.parametrize("condition", [True, False, np.bool_(True), np.bool_(False)])
@pytest.mark.parametrize("a,b", list(itertools.product(VALUES, repeat=2))[::5])
def test_where_with_one_condition_is_np_where(condition: bool, a: float, b: float) -> None:
    got = A.where(condition, a, b)
    want = np.where(condition, a, b)
    assert isinstance(got, np.generic)  # a numpy scalar, never a bare Python number
    assert got == want  # the chosen operand's own dtype: np.where would promote both's


def test_where_keeps_the_chosen_array_and_broadcasts_with_an_array_condition() -> None:
    a, b = np.arange(4.0), np.zeros(4)
    assert A.where(np.bool_(True), a, b) is a
    mask = np.array([True, False, True, False])
    assert np.array_equal(A.where(mask, a, 9.0), np.where(mask, a, 9.0))


@pytest.mark.parametrize(
    "a,b", list(itertools.product([0.0, -0.5, 2.0, math.inf, -math.inf, math.nan], repeat=2))
)
def test_scalar_maximum_and_minimum_are_numpys_nan_included(a: float, b: float) -> None:
    for ours, theirs in ((A.maximum, np.maximum), (A.minimum, np.minimum)):
        got, want = ours(np.float64(a), b), theirs(np.float64(a), b)
        assert isinstance(got, np.generic)
        assert (math.isnan(got) and math.isnan(want)) or got == want
    arr = np.array([a, b])
    assert np.array_equal(A.maximum(arr, 1.0), np.maximum(arr, 1.0), equal_nan=True)


@pytest.mark.parametrize(
    "shapes",
    [((), ()), ((3,), ()), ((), (3,), (3,)), ((3, 1), (4,)), ((2, 3), (3,), ()), ((1,), (5,))],
)
def test_joint_shape_is_broadcast_shapes(shapes: tuple[tuple[int, ...], ...]) -> None:
    assert A.joint_shape(*shapes) == np.broadcast_shapes(*shapes)


def _grid(n: int) -> dict[str, np.ndarray | float]:
    rng = np.random.default_rng(11)
    return {
        "hosts": rng.integers(1, 65, n).astype(np.float64),
        "per_host": rng.choice([1.0, 8.0], n),
        "gradient_bytes": rng.uniform(1e6, 1e10, n),
        "compute_seconds": rng.uniform(0.01, 1.0, n),
        "batch_per_accelerator": 16.0,  # a scalar among arrays
        "nic_bandwidth": rng.choice([3e9, 25e9], n),
        "intra_bandwidth": 230e9,
        "host_price": rng.uniform(1.0, 60.0, n),
        "reducers": rng.integers(1, 33, n).astype(np.float64),
        "reducer_bandwidth": 3.88e9,
        "reducer_price": 0.567,
    }


def test_a_sweep_in_blocks_equals_the_sweep_in_one_piece() -> None:
    grid = _grid(5 * 1024 + 7)  # not a multiple of the block
    whole = A.in_blocks(unblocked, block=10**9, **grid)
    blocked = A.in_blocks(unblocked, block=1024, **grid)
    for strategy_whole, strategy_blocked in zip(whole, blocked, strict=True):
        for field, a, b in zip(
            strategy_whole._fields, strategy_whole, strategy_blocked, strict=True
        ):
            a = np.broadcast_to(a, (5 * 1024 + 7,))
            assert b.shape == a.shape, field
            assert np.array_equal(a, b, equal_nan=True), field


def test_in_blocks_passes_small_and_scalar_calls_through_unchanged() -> None:
    calls: list[int] = []

    def fn(x: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
        calls.append(np.size(x))
        return x * scale, np.asarray(1.0)

    out = A.in_blocks(fn, block=4, x=np.arange(8.0), scale=2.0)
    assert calls == [8] and np.array_equal(out[0], np.arange(8.0) * 2.0)
    calls.clear()
    out = A.in_blocks(fn, block=4, x=np.arange(9.0).reshape(3, 3), scale=2.0)
    assert calls == [4, 4, 1]
    assert out[0].shape == (3, 3) and np.array_equal(out[1], np.ones((3, 3)))


def test_blocked_refuses_positional_arguments() -> None:
    with pytest.raises(TypeError, match="keyword arguments only"):
        gpu_training(1.0)


def test_gpu_training_blocks_large_sweeps_with_the_same_result() -> None:
    grid = _grid(3 * A.BLOCK)
    ring, _ = gpu_training(**grid)  # type: ignore[arg-type]
    direct, _ = unblocked(**grid)  # type: ignore[arg-type]
    assert np.array_equal(ring.step_seconds, direct.step_seconds)


def test_one_gpu_alone_is_planned() -> None:
    # A single rank takes the scalar paths everywhere (no collective at all): it once returned a
    # bare float where the planner needs a numpy value.
    p = predict_training(
        TrainingInputs(
            accelerator="nvidia-tesla-a100",
            per_worker=1,
            workers=1,
            parameters=1e8,
            flops_per_sample=6e8,
            batch_per_accelerator=4,
        )
    )
    assert p.strategies["Ring"].communication_seconds == 0.0
