"""Counts written the way ML people write them: ``340000000``, ``"340M"``, ``"1.3B"``.

Suffixes (decimal, upper case only): ``K`` = 10^3, ``M`` = 10^6, ``G`` and ``B`` = 10^9 (B for
billion, as model cards say "7B"), ``T`` = 10^12. At most four integer digits and three decimals
before a suffix, so every accepted string is a whole number of at least 1. Lower case is refused on
purpose: in Kubernetes quantities ``m`` means milli, and ``340m`` parameters would be a typo either
way.

The CRD states the same rule without CEL: the field is ``x-kubernetes-int-or-string`` with a
``pattern`` (checked only for strings) and ``minimum``/``maximum`` (checked only for integers).
After validation the value is a plain ``int``. A whole-valued number (YAML ``3.4e8``) is an integer,
as it is for the apiserver.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from ringmaster.api.base import whole_number

SUFFIXES: dict[str, int] = {"K": 10**3, "M": 10**6, "G": 10**9, "B": 10**9, "T": 10**12}
COUNT_MIN = 1
COUNT_MAX = 10**16

# RE2-compatible (the apiserver's regex engine): no lookarounds. A plain number of up to 16 digits,
# or a decimal with a suffix whose value cannot be zero ("0.5B" yes, "0.0M" no).
_DECIMAL = r"(?:[1-9][0-9]{0,3}(?:\.[0-9]{1,3})?|0\.(?:[1-9][0-9]{0,2}|0[1-9][0-9]?|00[1-9]))"
COUNT_PATTERN = rf"^(?:[1-9][0-9]{{0,15}}|{_DECIMAL}[KMGBT])$"
_COUNT_RE = re.compile(COUNT_PATTERN)


def parse_count(value: Any) -> int:
    """An int from an integer or a suffixed string; ValueError (naming the rule) otherwise."""
    value = whole_number(value)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError('must be an integer or a string such as "340M" or "1.3B"')
    if isinstance(value, int):
        if not COUNT_MIN <= value <= COUNT_MAX:
            raise ValueError(f"must be between {COUNT_MIN} and {COUNT_MAX}")
        return value
    if not _COUNT_RE.match(value):
        raise ValueError(
            f'must be a whole number or a number with a suffix K, M, G, B or T (e.g. "340M", '
            f'"1.3B"), not "{value}"'
        )
    suffix = value[-1]
    if suffix in SUFFIXES:
        return int(Decimal(value[:-1]) * SUFFIXES[suffix])
    return int(value)


def format_count(value: int) -> str:
    """A suffixed spelling that is exact and valid ("1.3B"), else the plain number."""
    for suffix, factor in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if value >= factor and (value * 1000) % factor == 0:
            text = f"{Decimal(value) / factor:f}"
            if "." in text:
                text = text.rstrip("0").rstrip(".")
            if _COUNT_RE.match(text + suffix):
                return f"{text}{suffix}"
    return str(value)


COUNT_SCHEMA: dict[str, Any] = {
    "x-kubernetes-int-or-string": True,
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": COUNT_PATTERN,
    "minimum": COUNT_MIN,
    "maximum": COUNT_MAX,
}

Count = Annotated[int, BeforeValidator(parse_count), WithJsonSchema(COUNT_SCHEMA)]
"""A positive count (parameters, FLOPs) written as an integer or a suffixed string."""


def _int_or_string(value: Any) -> int | str:
    value = whole_number(value)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError("must be an integer or a string")
    return value


IntOrString = Annotated[
    int | str,
    BeforeValidator(_int_or_string),
    WithJsonSchema(
        {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    ),
]
"""A Kubernetes resource quantity as users write it: ``4`` or ``"16Gi"``."""
