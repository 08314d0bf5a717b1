"""Status writes are JSON merge patches (RFC 7386): a field the operator clears must be sent as
null, or the apiserver keeps it (seen: a suspended job's old admission read back on resume)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmaster.controllers.base import merge_patch

pytestmark = pytest.mark.unit


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, section 2, as the apiserver applies it."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def test_a_cleared_admission_is_sent_as_null() -> None:
    running = {
        "phase": "Running",
        "pool": "a100-highgpu-8g",
        "admission": {"pool": "a100-highgpu-8g", "attempt": 0},
        "plan": {"strategy": "ReductionServer", "reducers": 25, "stepSeconds": 0.44},
    }
    suspended = {
        "phase": "Suspended",
        "pool": "a100-highgpu-8g",
        "plan": {"strategy": "Ring", "stepSeconds": 0.81},
    }
    patch = merge_patch(running, suspended)
    assert patch["admission"] is None
    assert patch["plan"]["reducers"] is None  # nested fields too
    assert apply_merge_patch(running, patch) == suspended


json_leaf = st.one_of(st.booleans(), st.integers(), st.text(max_size=5), st.lists(st.integers()))
json_object = st.recursive(
    st.dictionaries(st.sampled_from("abcde"), json_leaf, max_size=4),
    lambda children: st.dictionaries(
        st.sampled_from("abcde"), st.one_of(json_leaf, children), max_size=4
    ),
    max_leaves=12,
)


@given(current=json_object, new=json_object)
def test_applying_the_patch_to_the_old_status_gives_the_new_one(current, new) -> None:
    assert apply_merge_patch(current, merge_patch(current, new)) == new
