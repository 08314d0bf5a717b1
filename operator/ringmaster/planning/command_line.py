"""A pod template's command line as the words a program sees, and its options as (name, value)
pairs: what planning.serving_flags and planning.training_flags read against a plan.

Shell scripts (``sh -c "exec vllm serve ... --max-num-seqs $RINGMASTER_MAX_NUM_SEQS"``) are split
into their words; a program's own words run from its entrypoint to the end of its command (a
shell separator). Values that reference a variable (``$NAME``, ``${NAME}``, Kubernetes'
``$(NAME)``) are told apart from literals. Pure: no I/O.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Collection, Sequence

_REFERENCE = re.compile(r"^\$(?:\{(\w+)\}|\((\w+)\)|(\w+))")
SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "then", "else", "fi", "do", "done"})


def command_words(command: Sequence[str] | None, args: Sequence[str] | None) -> list[str]:
    """The container's command and args as one list of words, shell scripts split into theirs."""
    words: list[str] = []
    for item in [*(command or []), *(args or [])]:
        if not any(c.isspace() for c in item):
            words.append(item)
            continue
        try:
            split = shlex.split(item, posix=True)
        except ValueError:  # an unbalanced quote: its words as they are
            split = item.split()
        for word in split:
            # "...$RINGMASTER_MAX_MODEL_LEN; else ...": the command ends at the semicolon
            if word.endswith(";") and word != ";":
                words.extend((word[:-1], ";"))
            else:
                words.append(word)
    return words


def program_words(words: list[str], starts: Callable[[list[str], int], int]) -> list[str] | None:
    """The words after a program's entrypoint to the end of its command: ``starts(words, i)`` is
    the number of words the entrypoint takes at ``i`` (0: none there). None: no entrypoint."""
    for i in range(len(words)):
        taken = starts(words, i)
        if taken:
            rest = words[i + taken :]
            end = next((j for j, w in enumerate(rest) if w in SEPARATORS), len(rest))
            return rest[:end]
    return None


def options(words: list[str], switches: Collection[str]) -> list[tuple[str, str | None]]:
    """``--name value``, ``--name=value`` and ``-n value`` options in order; a name in
    ``switches`` takes no value; positional words are skipped."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word in ("-", "--"):
            continue
        if "=" in word:
            name, value = word.split("=", 1)
            out.append((name, value))
            continue
        if word not in switches and i < len(words) and not words[i].startswith("-"):
            out.append((word, words[i]))
            i += 1
        else:
            out.append((word, None))
    return out


def overrides(words: list[str]) -> list[tuple[str, str]]:
    """``key=value`` words (Hydra's and MaxText's config overrides), ``key`` without a leading
    ``+`` / ``++``."""
    out = []
    for word in words:
        if word.startswith("-") or "=" not in word:
            continue
        key, value = word.split("=", 1)
        out.append((key.lstrip("+"), value))
    return out


def referenced(value: str | None) -> str | None:
    """The variable a value starts with (``$NAME``, ``${NAME}``, ``$(NAME)``), else None."""
    if value is None:
        return None
    match = _REFERENCE.match(value)
    return next(g for g in match.groups() if g) if match else None


_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def shell_assignments(words: list[str]) -> dict[str, str]:
    """``NAME=value`` words of upper-case names (a script's ``TP=$RINGMASTER_TENSOR_PARALLEL``;
    lower-case ``key=value`` words are a program's overrides, not the shell's)."""
    out = {}
    for word in words:
        match = _ASSIGNMENT.match(word)
        if match and match.group(1).isupper():
            out[match.group(1)] = match.group(2)
    return out


def resolve(value: str | None, variables: dict[str, str], prefix: str) -> str | None:
    """``value`` through the variables it references (a script's assignments, the container's
    env) until a literal or a variable named ``prefix...`` (returned as ``$NAME``); None where
    it ends in a variable this command line does not define."""
    for _ in range(8):  # a chain of assignments, never a loop
        name = referenced(value)
        if name is None or value is None:
            return value
        if name.startswith(prefix):
            return f"${name}"
        if name not in variables:
            return None
        value = variables[name]
    return None


def same(a: str, b: str) -> bool:
    """Equal as numbers where both are, else as words (case aside)."""
    try:
        return float(a) == float(b)
    except ValueError:
        return a.strip().lower() == b.strip().lower()
