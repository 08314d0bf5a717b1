"""A gang that may run on several accelerators (``spec.accelerator.alternatives``) in the
admission cycle.

Its options (:class:`~ringmaster.admission.cycle.GangOption`) come best first by the job's
objective, each naming its accelerator; the cycle admits the first that fits now, as for any
gang. What differs:

- the queues: such a gang competes for every accelerator it may run on. An option whose
  accelerator's queue an earlier gang holds is left out (that gang starts first there); the
  gang waits behind it only when every option is held, and when it waits long enough to hold
  a queue (the queueing rule), it holds all of its accelerators', since any of them would do;
- the verdict: an Admit carries every other option with why it was not taken ("" where it had
  room too), so status can say why not the others;
- the waiting message: each accelerator with its shape and its pools' room.

Pure, as the cycle. Options without an accelerator (a gang with no alternatives) go through
unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ringmaster.admission.cycle import GangCheck, GangOption, WaitingGang

Considered = tuple[tuple["GangOption", str], ...]
"""Options not taken, each with why ("" where it had room now)."""


def has_alternatives(gang: WaitingGang) -> bool:
    return any(o.accelerator for o in gang.options)


def gang_queues(gang: WaitingGang) -> tuple[str, ...]:
    """What the gang competes for: the accelerator of each of its options, else its queue."""
    named = tuple(dict.fromkeys(o.accelerator for o in gang.options if o.accelerator))
    return named or (gang.queue,)


def open_options(
    gang: WaitingGang, held: Mapping[str, WaitingGang]
) -> tuple[WaitingGang, WaitingGang | None, Considered]:
    """The gang with only its options on queues no earlier gang holds; the holder, when every
    option is held (the gang waits behind it); and the options left out, with why."""
    if not has_alternatives(gang):
        return gang, held.get(gang.queue), ()
    kept: list[GangOption] = []
    dropped: list[tuple[GangOption, str]] = []
    holder: WaitingGang | None = None
    for option in gang.options:
        first = held.get(option.accelerator)
        if first is None:
            kept.append(option)
            continue
        holder = holder or first
        who = f"{first.key[0]}/{first.key[1]}"
        dropped.append((option, f"queued behind {who}, which starts first on {option.accelerator}"))
    if not kept:
        return gang, holder, ()
    return replace(gang, options=tuple(kept)), None, tuple(dropped)


def hold(held: dict[str, WaitingGang], gang: WaitingGang) -> None:
    """The gang holds every queue it competes for (the queueing rule decided it holds)."""
    for queue in gang_queues(gang):
        held[queue] = gang


def considered(
    checks: Sequence[tuple[GangOption, GangCheck]], chosen: GangOption, dropped: Considered
) -> Considered:
    """Every option but the chosen one, with why it was not taken ("" where it had room)."""
    if not chosen.accelerator:
        return ()
    return dropped + tuple((o, "" if c.fits else c.message) for o, c in checks if o != chosen)


def alternatives_waiting_message(
    checks: Sequence[tuple[GangOption, GangCheck]], pool_words: Callable[[GangCheck], str]
) -> str:
    """Why none of the gang's accelerators takes it now: each with its shape and its pools."""
    groups: dict[str, list[tuple[GangOption, GangCheck]]] = {}
    for option, check in checks:
        groups.setdefault(option.accelerator, []).append((option, check))
    parts = []
    for accelerator, items in groups.items():
        first = items[0][0]
        pools = "; ".join(f"pool {o.pool}: {pool_words(c)}" for o, c in items)
        parts.append(f"{accelerator} ({first.workers} workers x {first.per_worker}): {pools}")
    return "no accelerator it may run on has room for the gang now: " + " | ".join(parts)
