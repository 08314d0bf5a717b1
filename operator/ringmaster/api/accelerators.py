"""The accelerator types the API accepts, named as GKE labels nodes
(``cloud.google.com/gke-accelerator`` for GPUs, ``cloud.google.com/gke-tpu-accelerator`` for TPUs),
and the host shapes each comes in.

The engine's hardware catalog uses the same keys; a test compares the two sets.
"""

from __future__ import annotations

from typing import Literal, get_args

AcceleratorType = Literal[
    "nvidia-tesla-a100",
    "nvidia-a100-80gb",
    "nvidia-h100-80gb",
    "nvidia-h200-141gb",
    "nvidia-b200",
    "nvidia-tesla-v100",
    "nvidia-tesla-t4",
    "nvidia-tesla-p4",
    "tpu-v2",
    "tpu-v3-slice",
    "tpu-v4-podslice",
    "tpu-v5-lite-podslice",
    "tpu-v5p-slice",
    "tpu-v6e-slice",
]

ACCELERATOR_TYPES: frozenset[str] = frozenset(get_args(AcceleratorType))
TPU_ACCELERATOR_TYPES: frozenset[str] = frozenset(
    t for t in ACCELERATOR_TYPES if t.startswith("tpu-")
)
GPU_ACCELERATOR_TYPES: frozenset[str] = ACCELERATOR_TYPES - TPU_ACCELERATOR_TYPES

# Accelerators per host that a machine type offers; a worker (or serving replica) is one host.
HOST_SHAPES: dict[str, tuple[int, ...]] = {
    "nvidia-tesla-a100": (1, 2, 4, 8, 16),  # a2-highgpu-1g/2g/4g/8g, a2-megagpu-16g
    "nvidia-a100-80gb": (1, 2, 4, 8),  # a2-ultragpu-1g/2g/4g/8g
    "nvidia-h100-80gb": (1, 2, 4, 8),  # a3-highgpu-1g/2g/4g/8g (8 also a3-megagpu-8g)
    "nvidia-h200-141gb": (8,),  # a3-ultragpu-8g
    "nvidia-b200": (8,),  # a4-highgpu-8g
    "nvidia-tesla-v100": (1, 2, 4, 8),  # n1 machines with attached V100s
    "nvidia-tesla-t4": (1, 2, 4),  # n1 machines with attached T4s
    "nvidia-tesla-p4": (1, 2, 4),  # n1 machines with attached P4s
    "tpu-v2": (4,),  # a v2-8 host: 4 chips
    "tpu-v3-slice": (4,),  # ct3p-hightpu-4t
    "tpu-v4-podslice": (4,),  # ct4p-hightpu-4t
    "tpu-v5-lite-podslice": (1, 4, 8),  # ct5lp-hightpu-1t/4t/8t
    "tpu-v5p-slice": (4,),  # ct5p-hightpu-4t
    "tpu-v6e-slice": (1, 4, 8),  # ct6e-standard-1t/4t/8t
}

# TPU slice topology: chips along each axis of the torus; v4 slices are 3-D, the others 2-D.
_AXIS = "[1-9][0-9]{0,2}"
TOPOLOGY_2D = f"^{_AXIS}x{_AXIS}$"
TOPOLOGY_3D = f"^{_AXIS}x{_AXIS}x{_AXIS}$"
TOPOLOGY_PATTERNS: dict[str, str] = {
    "tpu-v2": TOPOLOGY_2D,
    "tpu-v3-slice": TOPOLOGY_2D,
    "tpu-v4-podslice": TOPOLOGY_3D,
    "tpu-v5-lite-podslice": TOPOLOGY_2D,
    "tpu-v5p-slice": TOPOLOGY_3D,
    "tpu-v6e-slice": TOPOLOGY_2D,
}
TOPOLOGY_EXAMPLES: dict[str, str] = {
    "tpu-v2": "4x4",
    "tpu-v3-slice": "4x4",
    "tpu-v4-podslice": "2x2x4",
    "tpu-v5-lite-podslice": "2x4",
    "tpu-v5p-slice": "2x2x4",
    "tpu-v6e-slice": "4x4",
}


def is_tpu(accelerator_type: str) -> bool:
    return accelerator_type in TPU_ACCELERATOR_TYPES


def topology_chips(topology: str) -> int:
    """Chips in a slice: the product of its axes ("2x2x4" -> 16)."""
    chips = 1
    for axis in topology.split("x"):
        chips *= int(axis)
    return chips


def shapes_text(accelerator_type: str) -> str:
    """ "1, 2, 4, 8, 16": the host shapes of one type, for messages."""
    return ", ".join(map(str, HOST_SHAPES[accelerator_type]))


def host_shapes_text() -> str:
    """The host shapes as one line, for error messages and docs."""
    return "; ".join(
        f"{name}: {', '.join(map(str, shapes))}" for name, shapes in HOST_SHAPES.items()
    )


# CEL literals built from the tables above, so the CRD and the Python twin cannot disagree.
def cel_string_list(values: frozenset[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in sorted(values)) + "]"


CEL_TPU_TYPES = cel_string_list(TPU_ACCELERATOR_TYPES)
CEL_HOST_SHAPES = (
    "{"
    + ", ".join(
        f"'{name}': [{', '.join(map(str, shapes))}]" for name, shapes in HOST_SHAPES.items()
    )
    + "}"
)
CEL_HOST_SHAPES_TEXT = (
    "{" + ", ".join(f"'{name}': '{shapes_text(name)}'" for name in HOST_SHAPES) + "}"
)
CEL_TOPOLOGY_PATTERNS = (
    "{" + ", ".join(f"'{name}': '{pattern}'" for name, pattern in TOPOLOGY_PATTERNS.items()) + "}"
)
