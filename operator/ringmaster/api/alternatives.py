"""TrainingJob's accelerator alternatives (issue 43, item 5): other accelerator types a job may
run on, each re-planned by the engine, and the objective that ranks them
(``spec.placement.objective``); the rules that refuse what no plan can repair, each CEL rule
with its Python twin; and what status records of the choice (:class:`AcceleratorChoice`)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import Field

from ringmaster.api.accelerators import TOPOLOGY_PATTERN, AcceleratorType, cel_is_tpu, is_tpu
from ringmaster.api.base import Int, Rule, SpecModel, StatusModel
from ringmaster.api.common import MachineType

Objective = Literal["EarliestFinish", "LowestCost"]

# At most this many alternatives: the GPU and TPU generations one cloud offers for training at
# once (GCE 2026: A100 40/80 GB, H100, H100 Mega, H200, B200, GB200, TPU v5e/v5p/v6e) are about
# that many, and each alternative is one more plan per look of a waiting job and one more
# term in the CEL rules' cost.
MAX_ALTERNATIVES = 8


class AcceleratorAlternative(SpecModel):
    """Another accelerator the job may run on. The engine plans the job on it again: its own
    workers, layout and batch split, under the primary's global batch."""

    type: AcceleratorType
    """Accelerator type, as ``accelerator.type`` (the operator's catalog must define it, or the
    job waits with reason ``UnknownAccelerator`` naming this field)."""
    per_worker: Int | None = Field(default=None, ge=1, le=16)
    """Accelerators per worker host; left out: the primary's ``perWorker``. Required for a TPU
    (chips per host)."""
    machine_type: MachineType | None = None
    """Worker machine type; left out: derived from the type and perWorker, as for the primary."""
    topology: str | None = Field(default=None, max_length=11, pattern=TOPOLOGY_PATTERN)
    """TPU slice topology (TPU only): the slice's hosts are its chips / perWorker."""
    workers: Int | None = Field(default=None, ge=1, le=2048)
    """Worker hosts on this accelerator (GPU only); left out: as many accelerators in all as the
    primary's (workers x perWorker), in whole hosts (rounded up)."""

    cel_rules = (
        Rule(
            cel=f"!{cel_is_tpu('self.type')} || has(self.topology)",
            message="topology is required for a TPU alternative (e.g. 2x2x4 for tpu-v5p-slice)",
            field_path=".topology",
            reason="FieldValueRequired",
            check=lambda a: not is_tpu(a.type) or a.topology is not None,
        ),
        Rule(
            cel=f"{cel_is_tpu('self.type')} || !has(self.topology)",
            message="topology applies only to TPU alternatives",
            field_path=".topology",
            reason="FieldValueForbidden",
            check=lambda a: is_tpu(a.type) or a.topology is None,
        ),
        Rule(
            cel=f"!{cel_is_tpu('self.type')} || has(self.perWorker)",
            message="perWorker is required for a TPU alternative (chips per host: 4 on most "
            "TPU hosts)",
            field_path=".perWorker",
            reason="FieldValueRequired",
            check=lambda a: not is_tpu(a.type) or a.per_worker is not None,
        ),
        Rule(
            cel="!has(self.topology) || !has(self.workers)",
            message="a TPU alternative's workers follow from its topology (chips / perWorker): "
            "leave workers out",
            field_path=".workers",
            reason="FieldValueForbidden",
            check=lambda a: a.topology is None or a.workers is None,
        ),
    )


def _types(accelerator: Any) -> list[str]:
    return [a.type for a in accelerator.alternatives or []]


# The rules on accelerator.alternatives that need the accelerator itself (TrainingAccelerator's).
ACCELERATOR_ALTERNATIVE_RULES: tuple[Rule, ...] = (
    Rule(
        cel="!has(self.alternatives) || self.alternatives.all(a, a.type != self.type)",
        message="an alternative names the primary accelerator (accelerator.type): alternatives "
        "are other accelerator types",
        field_path=".alternatives",
        check=lambda s: s.type not in _types(s),
    ),
    Rule(
        cel=(
            "!has(self.alternatives)"
            " || self.alternatives.all(a, self.alternatives.exists_one(b, b.type == a.type))"
        ),
        message="alternatives name each accelerator type once",
        field_path=".alternatives",
        reason="FieldValueDuplicate",
        check=lambda s: len(set(_types(s))) == len(_types(s)),
    ),
    Rule(
        cel="!has(self.alternatives) || !has(self.slices) || self.slices == 1",
        message="alternatives are not offered for a multislice job (slices > 1)",
        field_path=".alternatives",
        reason="FieldValueForbidden",
        check=lambda s: not s.alternatives or s.slices == 1,
    ),
)

_ALTERNATIVES = "self.accelerator.alternatives"
_NO_TPU_ALTERNATIVE = f"{_ALTERNATIVES}.all(a, !{cel_is_tpu('a.type')})"


def _tpu_alternative(spec: Any) -> bool:
    return any(is_tpu(t) for t in _types(spec.accelerator))


# The rules on accelerator.alternatives that need the rest of the spec (TrainingJobSpec's).
SPEC_ALTERNATIVE_RULES: tuple[Rule, ...] = (
    Rule(
        cel=f"!has({_ALTERNATIVES}) || !has(self.model.computeSecondsPerStep)",
        message="alternatives need a step the engine can predict on each accelerator: give "
        "model.flopsPerSample or model.architecture, not computeSecondsPerStep (a time "
        "measured on the primary accelerator)",
        field_path=".accelerator.alternatives",
        reason="FieldValueForbidden",
        check=lambda s: not s.accelerator.alternatives or s.model.compute_seconds_per_step is None,
    ),
    Rule(
        cel=(
            f"!has({_ALTERNATIVES}) || !has(self.communication)"
            " || (self.communication.strategy != 'ReductionServer'"
            " && !has(self.communication.reductionServer))"
            f" || {_NO_TPU_ALTERNATIVE}"
        ),
        message="a TPU alternative all-reduces over its slice's interconnect (ICI): a reduction "
        "server (communication.strategy ReductionServer, communication.reductionServer) is for "
        "GPU workers only",
        field_path=".accelerator.alternatives",
        reason="FieldValueForbidden",
        check=lambda s: (
            not _tpu_alternative(s)
            or (
                s.communication.strategy != "ReductionServer"
                and s.communication.reduction_server is None
            )
        ),
    ),
    Rule(
        cel=(
            f"!has({_ALTERNATIVES}) || !has(self.framework)"
            f" || self.framework.name == 'MaxText' || {_NO_TPU_ALTERNATIVE}"
        ),
        message="a TPU alternative runs MaxText (JAX / XLA): framework.name must be MaxText or "
        "left out",
        field_path=".framework.name",
        check=lambda s: (
            not _tpu_alternative(s) or s.framework is None or s.framework.name == "MaxText"
        ),
    ),
)


class AcceleratorChoice(StatusModel):
    """One accelerator the job could run on, as the engine planned it there, and why it was or
    was not chosen (``spec.placement.objective``)."""

    accelerator: str = Field(max_length=63)
    per_worker: int | None = None
    workers: int | None = None
    machine_type: str | None = Field(default=None, max_length=63)
    layout: str | None = Field(default=None, max_length=128)
    """The layout planned there, ``TP8 PP4 DP32`` (a model with an architecture)."""
    step_seconds: float | None = None
    """The predicted step there (calibrated where this cluster's correction applies)."""
    run_hours: float | None = None
    """The steps left x the step: how long the run takes there (absent without a step count)."""
    cost_per_hour_usd: float | None = Field(default=None, alias="costPerHourUSD")
    cost_usd: float | None = Field(default=None, alias="costUSD")
    """runHours x costPerHourUSD (the catalog's prices)."""
    predicted_finish: dt.datetime | None = None
    """The admission time + runHours, for the chosen accelerator and those that had room too."""
    chosen: bool = False
    why: str | None = Field(default=None, max_length=1024)
    """Why it was chosen, or why not, with the numbers ("no room: ...", "finishes later: ...",
    "costs more: ...", or why the engine could not plan the job there)."""
