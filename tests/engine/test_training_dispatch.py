"""DeepEP's dispatch in training (issue 42, item 2: "DeepEP's dispatch bytes (FP8, one copy per
node) where that dispatcher is named"): bytes and network share by hand, and the step."""

from __future__ import annotations

import numpy as np
import pytest

from ringmaster.engine import expert_dispatch as X
from ringmaster.engine import llm_training as L
from ringmaster.engine.efficiency import ALLTOALL_PEER_LATENCY
from ringmaster.engine.frameworks import framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_SELECTIVE
from ringmaster.engine.moe_training import expert_all_to_all_seconds
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

DEEPSEEK = KNOWN_TRANSFORMERS["deepseek-v3"]


def test_deepeps_four_exchanges_by_hand() -> None:
    # dispatch and the combine's gradient in FP8 (7,392 bytes a token), the combine and the
    # dispatch's gradient in BF16 (14,336): (7,392 + 14,336) / (2 x 14,336)
    assert X.deepep_bytes_scale(7168) == pytest.approx((7392 + 14336) / 28672)


def test_deepeps_network_share_by_hand() -> None:
    # EP 64 over 8 hosts, top-8: the all-to-all sends 8 x 56 / 64 = 7 copies over the NICs,
    # DeepEP one per other host a token's experts sit on, 7 (1 - (7/8)^8)
    share = float(X.deepep_network_share(8.0, 8.0, 64.0, 8.0))
    assert share == pytest.approx(7 * (1 - (7 / 8) ** 8) / 7.0)
    assert float(X.deepep_network_share(8.0, 1.0, 8.0, 8.0)) == 1.0  # one host: NVLink only


def _hw(hosts: int) -> L.LayoutHardware:
    host = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8)
    return L.layout_hardware(
        host, hosts, DEFAULT_CATALOG, compute_precision="fp8", framework=framework("Megatron")
    )


def test_the_training_exchange_by_hand_across_hosts() -> None:
    """One exchange of a rank's buffer over EP 64 on 8 hosts: NCCL's all-to-all of the buffer x
    deepep_bytes_scale on the NICs scaled by the network share, less the per-peer latency."""
    hw = _hw(8)
    nbytes = np.asarray(64e6)
    one = np.asarray(1.0)
    nccl = float(expert_all_to_all_seconds(nbytes, one, one, np.asarray(64.0), hw))
    deepep = float(
        expert_all_to_all_seconds(nbytes, one, one, np.asarray(64.0), hw, None, "DeepEP", DEEPSEEK)
    )
    from ringmaster.engine import collectives as C

    share = float(X.deepep_network_share(8.0, 8.0, 64.0, 8.0))
    fabric = hw.fabric(hw.nic_bandwidth / share)
    expected = (
        float(
            C.nccl_all_to_all(
                64e6 * X.deepep_bytes_scale(7168), 8.0, 8.0, fabric, with_busbw=False
            ).seconds
        )
        - 62 * ALLTOALL_PEER_LATENCY
    )
    assert deepep == pytest.approx(expected)
    assert deepep < nccl


@pytest.mark.parametrize("expert", [8, 16, 64])
def test_deepep_never_slows_a_layout(expert: int) -> None:
    hw = _hw(16)
    base = dict(
        tensor=1,
        pipeline=16,
        sharding=1,
        micro_batch=1,
        recompute=RECOMPUTE_SELECTIVE,
        global_batch=1024,
        expert=expert,
    )
    nccl = L.evaluate_layouts(DEEPSEEK, hw, **base)  # type: ignore[arg-type]
    deepep = L.evaluate_layouts(DEEPSEEK, hw, expert_dispatch="DeepEP", **base)  # type: ignore[arg-type]
    assert float(deepep.expert_parallel_seconds) <= float(nccl.expert_parallel_seconds)
    assert float(deepep.step_seconds) <= float(nccl.step_seconds)
    assert deepep.expert_dispatch == "DeepEP"
