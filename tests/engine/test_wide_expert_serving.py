"""Wide expert parallelism in serving (issue 42): attention data parallelism with the experts
spread over every accelerator of a replica across its hosts, redundant experts, and the
dispatchers (NCCL all-to-all, DeepEP's FP8 dispatch with one copy per destination host)."""

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.engine import collectives
from ringmaster.engine import expert_dispatch as X
from ringmaster.engine import llm_serving as L
from ringmaster.engine import llm_step as S
from ringmaster.engine.efficiency import (
    ALLTOALL_PEER_LATENCY,
    NCCL_BASE_LATENCY,
    NETWORK_HOP_LATENCY,
)
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from ringmaster.manifests.inference import serving_env
from ringmaster.planning.plans import LlmInferenceReport

pytestmark = pytest.mark.unit

DEEPSEEK = KNOWN_TRANSFORMERS["deepseek-v3"]
H100_HOST = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8)
H200_HOST = DEFAULT_CATALOG.host("nvidia-h200-141gb", 8)
H100 = H100_HOST.accelerator


def _span(host=H200_HOST) -> S.ReplicaSpan:  # type: ignore[no-untyped-def]
    fabric = collectives.gpu_fabric(host.accelerator, host.machine, 8)
    return S.ReplicaSpan(8, 1, fabric, float(fabric.net_bandwidth) / 8, host.machine)


def _terms(attention_data: int, tp: int = 1, **kw: object) -> S.ServingTerms:
    acc = H200_HOST.accelerator
    return S.serving_terms(
        DEEPSEEK,
        acc,
        tp,
        acc.peak("fp8"),
        1.0,
        1.0,
        2000.0,
        1000.0,
        compute_precision="fp8",
        span=_span(),
        expert_parallel=tp * attention_data,
        attention_data=attention_data,
        **kw,  # type: ignore[arg-type]
    )


# --- the dispatchers' bytes, by hand ------------------------------------------------------------


def test_deepeps_fp8_dispatch_is_a_byte_a_channel_and_a_scale_per_128() -> None:
    # DeepSeek-V3's hidden 7168: 7168 + 4 x 56 = 7392 bytes; 16-bit is 14336.
    assert X.dispatch_token_bytes(7168, "DeepEP") == 7392.0
    assert X.dispatch_token_bytes(7168, "AllToAll") == 14336.0
    assert X.combine_token_bytes(7168) == 14336.0
    assert X.dispatch_token_bytes(100, "DeepEP") == 100.0 + 4.0  # a partial group has a scale


def test_remote_host_copies_by_hand() -> None:
    assert float(X.remote_host_copies(8, 1)) == 0.0
    assert float(X.remote_host_copies(1, 2)) == pytest.approx(0.5)  # the other host, half the time
    # 9 hosts, top-8: 8 x (1 - (8/9)^8) = 4.86 other hosts, where the all-to-all sends 8 x 8/9.
    assert float(X.remote_host_copies(8, 9)) == pytest.approx(8 * (1 - (8 / 9) ** 8))
    assert float(X.remote_host_copies(8, 9)) < 8 * 8 / 9


def test_a_wide_group_exchange_by_hand_on_the_nics() -> None:
    """72 ranks on 9 H200 hosts: the NIC share (64/72 of the buffer, the host's 8 GPUs on its
    8 x 400 Gb/s) bounds a large buffer, as nccl_all_to_all states it."""
    group = X.ExpertGroup(72, 8, H200_HOST.accelerator, H200_HOST.machine)
    nbytes = 256 * 8 * 14336.0
    fabric = collectives.gpu_fabric(H200_HOST.accelerator, H200_HOST.machine, 8)
    nic = nbytes * (64 / 72) * 8 / float(fabric.net_bandwidth)
    # NCCL's base, the network hop and a send / receive per further peer (70), in turn
    latency = NCCL_BASE_LATENCY + NETWORK_HOP_LATENCY + 70 * ALLTOALL_PEER_LATENCY
    assert float(X.exchange_seconds(nbytes, group, 8.0)) == pytest.approx(nic + latency)
    # DeepEP's kernels reach every peer at once: no per-peer term
    assert float(X.exchange_seconds(nbytes, group, 8.0, peers_in_turn=False)) == pytest.approx(
        nic + NCCL_BASE_LATENCY + NETWORK_HOP_LATENCY
    )


def test_deepeps_normal_kernels_send_fewer_network_bytes_than_its_low_latency_ones() -> None:
    group = X.ExpertGroup(72, 8, H200_HOST.accelerator, H200_HOST.machine)
    normal = X.dispatch_combine_seconds(256, 7168, 8.0, group, "DeepEP", "normal")
    low = X.dispatch_combine_seconds(256, 7168, 8.0, group, "DeepEP", "low_latency")
    nccl = X.dispatch_combine_seconds(256, 7168, 8.0, group, "AllToAll")
    assert float(normal) < float(low) < float(nccl)


@pytest.mark.parametrize("tokens", [1.0, 64.0, 4096.0])
def test_an_nvlink_domain_across_hosts_is_never_slower_than_nics(tokens: float) -> None:
    """Property: the same 72-rank exchange on GB200 NVL72 trays (one NVLink domain) is never
    slower than on 9 hosts joined by their NICs."""
    gb200 = DEFAULT_CATALOG.host("nvidia-gb200", 4)
    nvl = X.ExpertGroup(72, 4, gb200.accelerator, gb200.machine)
    nics_machine = replace(gb200.machine, nvlink_domain=4)
    nics = X.ExpertGroup(72, 4, gb200.accelerator, nics_machine)
    assert gb200.machine.nvlink_domain >= 72
    a = float(X.dispatch_combine_seconds(tokens, 7168, 8.0, nvl))
    b = float(X.dispatch_combine_seconds(tokens, 7168, 8.0, nics))
    assert a <= b


# --- attention data parallelism ----------------------------------------------------------------


def test_attention_groups_divide_a_steps_per_token_costs_and_keep_their_dense_weights() -> None:
    one = _terms(1, tp=1)  # one accelerator: the whole model would not fit, but terms are terms
    wide = _terms(16)
    assert float(wide.gemm_per_token) == pytest.approx(float(one.gemm_per_token) / 16)
    assert float(wide.kv_read_per_token) == pytest.approx(float(one.kv_read_per_token) / 16)
    assert float(wide.sequence_overhead) == pytest.approx(float(one.sequence_overhead) / 16)
    # every group streams the dense weights whole; the experts are split over all 16
    assert float(wide.weights_read) == pytest.approx(float(one.weights_read))
    assert float(wide.expert_weights_read) == pytest.approx(float(one.expert_weights_read) / 16)


def test_the_latent_cache_is_split_by_sequence_not_copied_on_every_rank() -> None:
    """16 H200s as TP 16 copy MLA's latent on every rank; as 16 attention groups each holds its
    own sequences', so the replica holds 16x the tokens per byte of cache."""
    per_acc = S.weights_bytes_per_accelerator(DEEPSEEK, 1.0, 16)
    wide = _terms(16)
    tp16 = S.serving_terms(
        DEEPSEEK,
        H200_HOST.accelerator,
        16,
        H200_HOST.accelerator.peak("fp8"),
        1.0,
        1.0,
        2000.0,
        1000.0,
        compute_precision="fp8",
        span=_span(),
        expert_parallel=16,
    )
    assert float(S.weights_bytes_per_accelerator(DEEPSEEK, 1.0, 1, 1, 16)) > float(per_acc)
    latent = DEEPSEEK.layers * DEEPSEEK.kv_cache_elements_per_token_per_layer
    assert float(wide.kv_bytes_per_token) == float(tp16.kv_bytes_per_token) == latent
    # the wide replica keeps the dense weights on each rank, so less room per rank, but 16 groups
    assert float(wide.kv_cache_tokens) > 10 * float(tp16.kv_cache_tokens)


def test_weights_per_accelerator_by_hand_with_redundant_experts() -> None:
    routed = float(DEEPSEEK.routed_expert_parameters)
    dense = float(DEEPSEEK.parameters) - routed
    got = float(S.weights_bytes_per_accelerator(DEEPSEEK, 1.0, 1, 1, 72, 32))
    assert got == pytest.approx(dense + routed * (256 + 32) / 256 / 72)
    assert float(S.weights_bytes_per_accelerator(DEEPSEEK, 1.0, 8)) == pytest.approx(
        DEEPSEEK.parameters / 8
    )


def _r1(per_replica: int, accelerator: str = "nvidia-h200-141gb", **kw: object):  # type: ignore[no-untyped-def]
    inputs = L.LlmServingInputs(
        model=DEEPSEEK,
        accelerator=accelerator,
        per_replica=per_replica,
        precision="FP8",
        input_tokens_mean=2000,
        output_tokens_mean=1000,
        ttft_p99_seconds=10.0,
        tpot_p99_seconds=0.1,
        target_output_tokens_per_second=50_000,
        **kw,  # type: ignore[arg-type]
    )
    return L.predict_llm_serving(inputs, DEFAULT_CATALOG)


def test_deepseek_r1_with_attention_dp_and_ep_over_nine_hosts_plans() -> None:
    p = _r1(72, "nvidia-h100-80gb", attention_data=72, redundant_experts=32)
    assert p.feasible, p.reason
    assert (p.attention_data_parallel, p.expert_parallel, p.tensor_parallel) == (72, 72, 1)
    assert p.hosts_per_replica == 9
    assert p.layout.startswith("attention DP 72 x TP 1, EP 72 across 9 hosts")
    # the replica's batch is its groups' together: far beyond one scheduler's 2,048
    assert p.max_num_seqs > 2048
    routed = float(DEEPSEEK.routed_expert_parameters)
    dense = float(DEEPSEEK.parameters) - routed
    assert p.weights_bytes_per_accelerator == pytest.approx(dense + routed * 288 / 256 / 72)


def test_deepep_serves_more_than_nccls_all_to_all_across_hosts() -> None:
    nccl = _r1(16, attention_data=16)
    deepep = _r1(16, attention_data=16, expert_dispatch="DeepEP")
    assert deepep.expert_dispatch == "DeepEP" and nccl.expert_dispatch == "AllToAll"
    assert deepep.offline_output_tokens_per_second > nccl.offline_output_tokens_per_second


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        (dict(attention_data=16, expert_parallel=8), "must be the replica's 16 accelerators"),
        (dict(attention_data=16, redundant_experts=8), "must divide the 264 expert slots"),
        (dict(expert_dispatch="NVSHMEM"), "expertDispatch 'NVSHMEM'"),
    ],
)
def test_a_wide_layout_the_api_would_refuse_is_refused_by_the_engine_too(
    kw: dict[str, object], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        _r1(16, **kw)


def test_a_dense_model_refuses_attention_data_parallelism() -> None:
    inputs = L.LlmServingInputs(
        KNOWN_TRANSFORMERS["llama-3-8b"], "nvidia-h100-80gb", 8, "BF16", 100, 100, 1.0, 0.1,
        attention_data=8,
    )  # fmt: skip
    with pytest.raises(ValueError, match="attention data parallelism needs a mixture"):
        L.predict_llm_serving(inputs, DEFAULT_CATALOG)


def _plan(p: L.LlmServingPrediction) -> dict[str, object]:
    return LlmInferenceReport("r1", "default", "FP8", p).to_json()


def test_the_wide_layout_reaches_the_plan_and_the_servers_env() -> None:
    p = _r1(16, attention_data=16, redundant_experts=16, expert_dispatch="DeepEP")
    plan = _plan(p)
    assert plan["attentionDataParallel"] == 16
    assert plan["redundantExperts"] == 16
    assert plan["expertDispatch"] == "DeepEP"
    env = serving_env(plan)
    assert env["RINGMASTER_ATTENTION_DATA_PARALLEL"] == "16"
    assert env["RINGMASTER_EXPERT_PARALLEL"] == "16"
    assert env["RINGMASTER_REDUNDANT_EXPERTS"] == "16"
    assert env["RINGMASTER_EXPERT_DISPATCH"] == "DeepEP"
    assert env["RINGMASTER_GROUP_SIZE"] == "2"
    # a plain MoE endpoint's env does not change
    plain = serving_env(_plan(_r1(8, expert_parallel=8, tensor_parallel=8)))
    assert not {k for k in plain if "ATTENTION" in k or "REDUNDANT" in k or "DISPATCH" in k}


def test_more_groups_never_lower_the_offline_maximum_of_a_step_at_the_same_tokens() -> None:
    """Property: at a fixed per-group batch, splitting the replica into more attention groups
    never makes one group's step slower per token (the experts' share per rank only shrinks)."""
    steps = []
    for groups in (2, 4, 8):
        t = _terms(groups)
        steps.append(float(S.step_seconds(t, 64.0 * groups, 0.0)) / (64.0 * groups))
    assert np.all(np.diff(steps) <= 1e-12)


def test_two_batch_overlap_charges_only_the_exchange_a_tokens_compute_does_not_hide() -> None:
    plain = _terms(16, dispatcher="DeepEP")
    overlap = _terms(16, dispatcher="DeepEP", two_batch_overlap=True)
    hidden = float(
        plain.gemm_per_token
        + plain.expert_gemm_per_token
        + plain.context_tokens * plain.kv_read_per_token
    )
    exchange = float(plain.allreduce_per_token)  # TP 1: the per-token collective is the a2a
    assert float(overlap.allreduce_per_token) == pytest.approx(max(exchange - hidden, 0.0))
    assert float(overlap.allreduce_base) <= float(plain.allreduce_base)
    # each micro-batch streams the weights its tokens touch: twice a step's
    assert float(overlap.weights_read) == pytest.approx(2 * float(plain.weights_read))
    assert float(overlap.expert_weights_read) == pytest.approx(2 * float(plain.expert_weights_read))


def test_two_batch_overlap_pays_at_large_batches_and_costs_at_small_ones() -> None:
    """The trade SGLang's write-up describes: with the exchange on the NICs, overlapping it
    wins at hundreds of sequences per GPU and loses at a handful (the weights twice)."""
    plain = _terms(16, dispatcher="DeepEP")
    overlap = _terms(16, dispatcher="DeepEP", two_batch_overlap=True)
    many, few = 16 * 256.0, 16 * 2.0
    assert float(S.step_seconds(overlap, many, 0.0)) < float(S.step_seconds(plain, many, 0.0))
    assert float(S.step_seconds(overlap, few, 0.0)) > float(S.step_seconds(plain, few, 0.0))


def test_two_batch_overlap_needs_attention_data_parallelism() -> None:
    with pytest.raises(ValueError, match="two-batch overlap needs attention data"):
        _r1(16, tensor_parallel=16, two_batch_overlap=True)
    p = _r1(16, attention_data=16, expert_dispatch="DeepEP", two_batch_overlap=True)
    assert p.two_batch_overlap
    assert serving_env(_plan(p))["RINGMASTER_TWO_BATCH_OVERLAP"] == "1"
