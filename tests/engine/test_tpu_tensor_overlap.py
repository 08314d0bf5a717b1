"""MaxText on a TPU slice runs its tensor-parallel collectives beside the matmuls they feed
(XLA's async collective fusion and collective matmul, set by MaxText's own scripts): the step
pays only what exceeds the micro-batch's GEMMs."""

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.calibration.llm_training import maxtext_model
from ringmaster.calibration.multislice import v5e_slices
from ringmaster.engine import llm_training as L
from ringmaster.engine.llm_layout_names import RECOMPUTE_FULL, RING, SHARD_FULL

pytestmark = pytest.mark.unit


def _evaluate(hw: L.LayoutHardware) -> L.LayoutArrays:
    return L.evaluate_layouts(
        maxtext_model(128),
        hw,
        global_batch=256,
        tensor=16,
        pipeline=1,
        sharding=SHARD_FULL,
        micro_batch=16,
        recompute=RECOMPUTE_FULL,
        strategy=RING,
    )


def test_tensor_parallel_time_beside_the_gemms_on_a_tpu_slice() -> None:
    hw = v5e_slices(1)
    assert hw.framework.name == "MaxText" and hw.framework.overlaps_tensor_parallel_on_tpu
    serial_hw = replace(hw, framework=replace(hw.framework, overlaps_tensor_parallel_on_tpu=False))
    overlapped, serial = _evaluate(hw), _evaluate(serial_hw)
    exposed = float(overlapped.tensor_parallel_seconds)
    whole = float(serial.tensor_parallel_seconds)
    gemm = float(serial.gemm_seconds)
    # TP 16's collectives on one ICI axis take a third of the GEMMs here: all of them hidden
    assert 0.0 < whole < gemm
    assert exposed == pytest.approx(max(whole - gemm, 0.0), abs=1e-12)
    assert float(overlapped.step_seconds) == pytest.approx(
        float(serial.step_seconds) - whole + exposed, rel=1e-9
    )
    assert float(overlapped.mfu) > float(serial.mfu)


def test_the_overlap_never_slows_a_layout() -> None:
    hw = v5e_slices(2)
    serial_hw = replace(hw, framework=replace(hw.framework, overlaps_tensor_parallel_on_tpu=False))
    a, b = _evaluate(hw), _evaluate(serial_hw)
    assert np.all(np.asarray(a.step_seconds) <= np.asarray(b.step_seconds) * (1 + 1e-12))
