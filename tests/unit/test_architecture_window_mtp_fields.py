"""spec.model.architecture's slidingWindow and mtpLayers: what the engine receives, the rule's CEL
and Python twins agreeing, and the parameter count (and its CEL twin) left as published."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ringmaster.api import ManifestError, parse_manifest
from ringmaster.api.architecture import (
    SlidingWindow,
    TransformerArchitecture,
    architecture_parameters,
)
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from ringmaster.planning.layouts import transformer_of
from tests.e2e.test_admission import load_example
from tests.unit.test_api_bad_input import offline_admit, python_errors

pytestmark = pytest.mark.unit

# openai/gpt-oss-120b's config.json, in the API's names.
GPT_OSS_120B: dict[str, Any] = {
    "layers": 36,
    "hidden_size": 2880,
    "attention_heads": 64,
    "kv_heads": 8,
    "head_dim": 64,
    "ffn_hidden_size": 2880,
    "ffn_type": "Gated",
    "vocab_size": 201088,
    "sequence_length": 131072,
    "experts": 128,
    "active_experts": 4,
    "sliding_window": SlidingWindow(size=128, full_attention_every=2),
    # quantization_config: quant_method mxfp4, the experts only (engine.checkpoint_formats)
    "expert_weights": "MXFP4",
}


def test_gpt_oss_as_the_api_states_it_is_the_catalogs():
    arch = TransformerArchitecture(**GPT_OSS_120B)
    assert transformer_of(arch) == KNOWN_TRANSFORMERS["gpt-oss-120b"]


def test_mtp_layers_reach_the_engine_and_leave_the_count_alone():
    dense = load_example("trainingjob-llama3-8b-fsdp-h100.yaml")["spec"]["model"]["architecture"]
    plain = TransformerArchitecture.model_validate(dense)
    with_mtp = TransformerArchitecture.model_validate({**dense, "mtpLayers": 1})
    assert transformer_of(with_mtp).mtp_layers == 1
    assert transformer_of(plain).mtp_layers == 0
    assert architecture_parameters(with_mtp) == architecture_parameters(plain)
    assert transformer_of(with_mtp).parameters == architecture_parameters(with_mtp)


def test_a_window_of_one_full_layer_in_one_is_refused_by_the_schema():
    with pytest.raises(ValidationError):
        SlidingWindow(size=128, full_attention_every=1)


def _doc(window: dict[str, Any] | None, layers: int, mtp: int | None) -> dict[str, Any]:
    doc = load_example("trainingjob-llama3-8b-fsdp-h100.yaml")
    arch = doc["spec"]["model"]["architecture"]
    arch["layers"] = layers
    if window is not None:
        arch["slidingWindow"] = window
    if mtp is not None:
        arch["mtpLayers"] = mtp
    return doc


@settings(max_examples=120, deadline=None)
@given(
    layers=st.integers(1, 80),
    size=st.integers(-1, 1 << 20),
    every=st.one_of(st.none(), st.integers(-1, 100)),
    mtp=st.one_of(st.none(), st.integers(-1, 20)),
)
def test_the_crd_and_parse_manifest_agree(layers, size, every, mtp):
    """The slidingWindow rule and bounds, and mtpLayers' bounds: the same verdict and field from
    the CRD (schema and CEL, as the apiserver admits) and from parse_manifest, and the same
    message where both refuse by the rule."""
    window = {"size": size} if every is None else {"size": size, "fullAttentionEvery": every}
    doc = _doc(window, layers, mtp)
    crd = offline_admit(copy.deepcopy(doc))
    crd_paths = {path for _, path, _ in crd}
    python_paths = set(python_errors(copy.deepcopy(doc)))
    assert bool(crd_paths) == bool(python_paths), (crd_paths, python_paths)
    assert python_paths <= crd_paths
    rule_path = "spec.model.architecture.slidingWindow.fullAttentionEvery"
    cel = {(path, message) for layer, path, message in crd if layer == "cel"}
    try:
        parse_manifest(copy.deepcopy(doc))
    except ManifestError as exc:
        for error in exc.errors:
            if error.path == rule_path and any(path == rule_path for path, _ in cel):
                assert (error.path, error.message) in cel
    if mtp is not None and not 0 <= mtp <= 16:
        return  # refused by mtpLayers' bound; the apiserver then skips the object's rules
    expected = size >= 1 and (every is None or 2 <= every <= layers)
    refused_by_window = any(
        p.startswith("spec.model.architecture.slidingWindow") for p in crd_paths
    )
    assert refused_by_window == (not expected)


def test_the_rules_message_names_both_numbers():
    doc = _doc({"size": 4096, "fullAttentionEvery": 64}, 32, None)
    cel = [m for layer, p, m in offline_admit(doc) if layer == "cel" and "slidingWindow" in p]
    assert cel == [
        "slidingWindow.fullAttentionEvery 64 must be at most layers 32 (leave it out for a"
        " window on every layer)"
    ]
