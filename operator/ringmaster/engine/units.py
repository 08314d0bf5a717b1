"""Units used across the engine. Everything inside the engine is SI: bytes, seconds, FLOP/s.

Vendors quote network links in bits per second (Gbps) and memories and GPU links in bytes per
second (GB/s); these helpers keep the conversions in one place.
"""

from __future__ import annotations

KB = 1e3
MB = 1e6
GB = 1e9
MIB = 1024.0**2
GIB = 1024.0**3
TERA = 1e12
US = 1e-6  # one microsecond in seconds
MS = 1e-3  # one millisecond in seconds


def gbps_to_bytes_per_second(gigabits_per_second: float) -> float:
    """A network rate in Gbps (10^9 bits/s) as bytes per second."""
    return gigabits_per_second * 1e9 / 8.0


def bytes_per_second_to_gbps(bytes_per_second: float) -> float:
    return bytes_per_second * 8.0 / 1e9


# Bytes per element of each numeric type the API names (gradients, weights).
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "int8": 1}
