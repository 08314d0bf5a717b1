"""The result a measurement pod posts (profiling/results.py): what is accepted and what is
refused, with the reason the pod gets back."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from ringmaster.profiling.results import MAX_BODY_BYTES, ResultRefused, parse_result

pytestmark = pytest.mark.unit
DEVICE = {"name": "NVIDIA H100 80GB HBM3", "count": 8, "memoryBytes": 85 * 2**30, "torch": "2.5"}


def body(**extra):
    return {"version": 1, "node": "gpu-7", "device": DEVICE, **extra}


def test_the_request_bytes_are_read_as_json_with_the_apis_spelling():
    result = parse_result(
        json.dumps(body(hbmGBps=3000.0, sustainedTflops={"bf16": 700.0})).encode()
    )
    assert result.hbm_gbps == 3000.0 and result.sustained_tflops == {"bf16": 700.0}


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"{not json", "not JSON"),
        (b"x" * (MAX_BODY_BYTES + 1), "over"),
        (json.dumps({"version": 1, "node": "gpu-7"}).encode(), "device is required"),
        (json.dumps(body(failure="no torch", hbmGBps=1.0)).encode(), "carries no measurements"),
        (json.dumps(body(sustainedTflops={"bf16": 1e9})).encode(), "sustainedTflops"),
        (json.dumps(body(hbmGBps=-1)).encode(), "hbmGBps"),
        (json.dumps(body(surprise=1)).encode(), "surprise"),
        (json.dumps(body(time="2030-01-01T00:00:00Z")).encode(), "in the future"),
    ],
)
def test_a_bad_result_is_refused_with_its_reason(payload: bytes, why: str):
    now = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)
    with pytest.raises(ResultRefused, match=why):
        parse_result(payload, now)


def test_a_failure_alone_is_a_result():
    result = parse_result({"version": 1, "node": "gpu-7", "failure": "PyTorch is not importable"})
    assert result.failure and result.device is None
