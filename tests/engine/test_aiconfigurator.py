"""AIConfigurator's operator databases: the decode terms fitted on them, the rows they reject, and
the checks ``ringmaster calibrate`` prints (calibration.aiconfigurator)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.calibration import aiconfigurator as A
from ringmaster.engine import ceilings as CE
from ringmaster.engine.hardware import DEFAULT_CATALOG

pytestmark = pytest.mark.unit


def test_the_chips_decode_terms_are_the_ones_the_databases_give():
    derived = A.derive_chip_decode_terms()
    for chip, terms in derived.items():
        assert CE.CHIP_DECODE_TERMS[chip] == terms, chip
    assert set(derived) == CE.AIC_DECODE_CHIPS


def test_the_h100_over_itself_gives_back_its_measured_terms(monkeypatch):
    """The ratio carries nothing of a database's absolute level: the H100's table over itself
    returns the H100's own measured terms, floors included."""
    monkeypatch.setitem(A.PAIR_VERSION, A.H100, "0.19.0")
    terms = A.ratio_decode_terms(A.H100)
    assert terms["bf16"] == CE.H100_DECODE_GEMM["bf16"]
    assert terms[CE.DECODE_ATTENTION_KERNEL] == CE.H100_DECODE_ATTENTION["flash2"]


def test_a_chip_that_streams_less_than_the_h100_gets_a_lower_fraction():
    """The B200 reads its weights at a lower fraction of its datasheet than the H100 in vLLM's
    database, and the floors stay the H100's (a ratio of graph-timed floors is not one)."""
    b200 = A.ratio_decode_terms("nvidia-b200")
    assert b200["bf16"][0] < CE.H100_DECODE_GEMM["bf16"][0]
    assert b200["bf16"][1] == CE.H100_DECODE_GEMM["bf16"][1]
    assert b200["flash2"][1] == CE.H100_DECODE_ATTENTION["flash2"][1]


def test_rows_faster_than_the_datasheet_are_left_out_and_counted():
    t = A.table("nvidia-h100-80gb", "vllm", "0.19.0")
    acc = DEFAULT_CATALOG.accelerator(t.accelerator)
    m, n, k = 4096.0, 8192.0, 8192.0
    impossible = 2 * m * n * k / (2.0 * acc.peak("bf16"))  # twice the dense peak
    raw = replace(
        t,
        gemm_dtype=np.append(t.gemm_dtype, "bf16"),
        gemm_mnk=np.vstack([t.gemm_mnk, [m, n, k]]),
        gemm_seconds=np.append(t.gemm_seconds, impossible),
        rejected=(),
    )
    kept = A._possible(raw)
    assert len(kept.gemm_seconds) == len(t.gemm_seconds)
    assert kept.rejected == (("GEMM", 1),)


def test_the_h200s_broken_prefill_table_is_rejected_not_checked():
    """AIConfigurator's H200 vLLM 0.19.0 prefill attention runs above the H200's peak."""
    t = A.table("nvidia-h200-141gb", "vllm", "0.19.0")
    assert dict(t.rejected)["prefill attention"] > 0
    acc = DEFAULT_CATALOG.accelerator(t.accelerator)
    assert np.all(A._prefill_flops(t.prefill) / t.prefill_seconds <= acc.peak("bf16"))


def test_the_evidence_names_where_each_chips_decode_terms_come_from():
    def decode(name: str) -> str:
        return CE.ceilings_for(DEFAULT_CATALOG.accelerator(name)).evidence["decode"]

    assert decode("nvidia-b200").startswith("published:")
    assert "aiconfigurator" in decode("nvidia-b200")
    assert decode("nvidia-h200-141gb").startswith("measured:")
    assert decode("amd-mi300x").startswith("extrapolated:")
    b200 = CE.ceilings_for(DEFAULT_CATALOG.accelerator("nvidia-b200"))
    assert b200.decode_gemm["bf16"] == CE.CHIP_DECODE_TERMS["nvidia-b200"]["bf16"]
    assert b200.decode_attention["flash2"] == CE.CHIP_DECODE_TERMS["nvidia-b200"]["flash2"]


def test_the_method_checked_on_the_h200_holds_the_streaming_terms():
    """f_w and E_d by the ratio land within 5 % of the lent H200's; f_kv does not (vLLM's
    FlashAttention 3 against the team's FlashAttention 2), and the section says both."""
    check = {name: (by_ratio, measured) for name, by_ratio, measured in A.ratio_check()}
    for name in ("f_w", "E_d"):
        by_ratio, measured = check[name]
        assert by_ratio == pytest.approx(measured, rel=0.05), name
    assert set(check) == {"f_w", "E_d", "f_kv"}


def test_only_the_fitting_tables_decode_ops_are_marked_fitted():
    rows = A.check_rows()
    fitted = {(c.table, c.op) for c in rows if c.role == "fitted"}
    assert fitted
    for c in rows:
        if c.role == "fitted" and c.op == "prefill GEMM fp4":  # every engine's: the FP4 ratio
            assert c.accelerator in A.GEMM_RATE_CHIPS
        elif c.role == "fitted":
            assert c.engine == A.FIT_ENGINE
            assert c.op in ("decode GEMM bf16", "decode attention")
            assert c.accelerator in (*A.FITTED_CHIPS, A.H100)
    assert ("h200_sxm vllm 0.19.0", "decode GEMM bf16") not in fitted  # the check of the method
    assert any(c.engine == "trtllm" for c in rows) and any(c.engine == "sglang" for c in rows)


def test_the_calibrate_section_lists_every_table_and_the_rejected_rows():
    text = A.render_section()
    for t in A.tables():
        assert t.label in text
    assert "rows faster than the datasheet allows" in text
    assert "h200_sxm vllm 0.19.0" in text.split("left out:")[1]
    assert A.source().split(" @ ")[1].split(",")[0] in text


def test_each_prefill_attention_call_is_priced_at_its_own_batch_and_heads(monkeypatch):
    """The engines' prefill-attention tables (FlashAttention 3, FlashInfer, TensorRT-LLM's FMHA)
    check the attention's occupancy: with each call at its own batch and heads the median over
    the tables falls from 29.5 % to under 24 %, and Hopper's and Ampere's SGLang tables (no
    faulty rows) hold within 11 %."""
    with_it = {
        (c.table, c.engine): c.median_abs for c in A.check_rows() if c.op == "prefill attention"
    }
    assert float(np.median(list(with_it.values()))) < 0.24
    for table in ("a100_sxm", "h100_sxm", "h200_sxm"):
        assert with_it[(f"{table} sglang 0.5.10", "sglang")] < 0.11, table
    A.check_rows.cache_clear()
    monkeypatch.setattr(CE, "ATTENTION_OCCUPANCY", (0.0, 0.0))  # the measured rate alone
    try:
        without = {
            (c.table, c.engine): c.median_abs for c in A.check_rows() if c.op == "prefill attention"
        }
    finally:
        A.check_rows.cache_clear()
    assert float(np.median(list(without.values()))) > 0.28
    assert sum(with_it[k] < without[k] for k in with_it) >= 8
