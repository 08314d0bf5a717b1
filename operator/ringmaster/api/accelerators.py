"""Accelerator names, as GKE labels nodes: ``cloud.google.com/gke-accelerator`` for GPUs
(``nvidia-tesla-a100``, ``nvidia-h200-141gb``, ``nvidia-b200``, ``nvidia-l4``,
``nvidia-h100-mega-80gb``) and ``cloud.google.com/gke-tpu-accelerator`` for TPUs
(``tpu-v5p-slice``, ``tpu-v6e-slice``, ``tpu7x``).

The set is open: the schema accepts any name of that form, and the operator's hardware catalog
(the engine's built-in entries plus the chart's catalog ConfigMap, docs/catalog.md) says which
names it knows, with their host shapes and TPU topologies. A job naming an accelerator the catalog
does not define waits with ``Schedulable=False``, reason ``UnknownAccelerator``; no CRD change is
needed to add one.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# GKE's accelerator label values: lower-case words of letters and digits joined by single dashes,
# starting with a letter (every value GKE documents has this form); at most 63 characters, the
# limit of a Kubernetes label value.
ACCELERATOR_NAME_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
ACCELERATOR_NAME_MAX_LENGTH = 63
AcceleratorType = Annotated[
    str, Field(pattern=ACCELERATOR_NAME_PATTERN, max_length=ACCELERATOR_NAME_MAX_LENGTH)
]

# GKE names every TPU accelerator "tpu..." (tpu-v4-podslice, tpu-v6e-slice, tpu7x) and no GPU so:
# the one rule that tells a TPU (a slice with a topology, google.com/tpu) from a GPU by name.
TPU_PREFIX = "tpu"


def cel_is_tpu(field: str) -> str:
    """The same rule in CEL, for the accelerator type at ``field`` (``self.type``)."""
    return f"{field}.startsWith('{TPU_PREFIX}')"


# TPU slice topology: chips along each axis of the torus, 2-D ("4x4") or 3-D ("2x2x4"); which of
# the two an accelerator takes is the catalog's (topology dimensions).
_AXIS = "[1-9][0-9]{0,2}"
TOPOLOGY_PATTERN = f"^{_AXIS}(x{_AXIS}){{1,2}}$"


def is_tpu(accelerator_type: str) -> bool:
    return accelerator_type.startswith(TPU_PREFIX)


def topology_chips(topology: str) -> int:
    """Chips in a slice: the product of its axes ("2x2x4" -> 16)."""
    chips = 1
    for axis in topology.split("x"):
        chips *= int(axis)
    return chips


def topology_dims(topology: str) -> int:
    """Axes of a slice topology ("2x2x4" -> 3)."""
    return len(topology.split("x"))
