"""How the three controllers report: one Event type, one way to set conditions.

Conditions follow the Kubernetes API conventions: ``lastTransitionTime`` moves only when the
status changes, and every condition carries the generation it was computed from. A transition
(status or reason changed) is worth an Event; a new message alone (progress such as "11/25
reducers ready") updates the condition quietly.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from ringmaster.api import Condition, find_condition, set_condition
from ringmaster.api.common import ConditionStatus


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    # Empty: the API names it. Set: posting it again is harmless (the API keeps the first).
    name: str = ""


class _HasConditions(Protocol):
    conditions: list[Condition]


@dataclass(frozen=True)
class Change:
    before: Condition | None

    @property
    def new(self) -> bool:
        return self.before is None

    def was(self, status: ConditionStatus, reason: str | None = None) -> bool:
        """The condition had this status (and reason) before."""
        return (
            self.before is not None
            and self.before.status == status
            and (reason is None or self.before.reason == reason)
        )


class Conditions:
    """Sets the conditions of one status for one generation."""

    def __init__(self, status: _HasConditions, generation: int, now: dt.datetime) -> None:
        self.status = status
        self.generation = generation
        self.now = now

    def set(self, type_: str, value: ConditionStatus, reason: str, message: str) -> Change:
        before = find_condition(self.status.conditions, type_)
        self.status.conditions = set_condition(
            self.status.conditions, type_, value, reason, message, self.generation, self.now
        )
        return Change(before)

    def transition(self, type_: str, value: ConditionStatus, reason: str, message: str) -> bool:
        """Set a condition; True when its status or reason changed (worth an Event)."""
        return not self.set(type_, value, reason, message).was(value, reason)

    def get(self, type_: str) -> Condition | None:
        return find_condition(self.status.conditions, type_)

    def remove(self, type_: str) -> None:
        """Drop a condition that no longer applies (the feature it reported is off)."""
        self.status.conditions = [c for c in self.status.conditions if c.type != type_]

    def stamp(self) -> None:
        """Every condition now describes this generation: the state machine has judged the whole
        status against the current spec, and the conditions it kept still hold."""
        self.status.conditions = [
            c.model_copy(update={"observed_generation": self.generation})
            for c in self.status.conditions
        ]


# Valid but implausible input (a step longer than a day, memory beyond any accelerator): the
# plan carries the engine's warnings (planning/plausibility.py); the object says so in a
# condition and one Warning Event per new warning, and runs all the same.
PLAUSIBLE = "Plausible"
IMPLAUSIBLE_INPUT = "ImplausibleInput"
_WARNING_SEPARATOR = "; "


def plan_warnings(plan: object | None) -> list[str]:
    """The warnings a typed plan (TrainingPlan, InferencePlan) carries, if it has the field."""
    return [str(w) for w in getattr(plan, "warnings", None) or []]


def report_plausibility(conditions: Conditions, warnings: Sequence[str]) -> list[Event]:
    """Set the Plausible condition from the plan's warnings; the Events for warnings not
    reported before (the condition's message remembers them, so a restarted operator does not
    repeat them). No warnings: the condition clears if it was False, and is not added if not."""
    before = conditions.get(PLAUSIBLE)
    if not warnings:
        if before is not None and before.status == "False":
            conditions.set(PLAUSIBLE, "True", "Plausible", "no implausible input")
        return []
    reported = (
        set(before.message.split(_WARNING_SEPARATOR))
        if before is not None and before.status == "False"
        else set()
    )
    conditions.set(PLAUSIBLE, "False", IMPLAUSIBLE_INPUT, _WARNING_SEPARATOR.join(warnings))
    return [Event("Warning", IMPLAUSIBLE_INPUT, w) for w in warnings if w not in reported]
