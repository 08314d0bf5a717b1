"""Every third-party distribution the package imports is declared in pyproject.toml (issue 40).

aiohttp arrived only through kopf's own dependencies while controllers/progress_server.py
imported it: a kopf that dropped it would have broken the operator at start-up, with nothing
in pyproject.toml to say why. The package's imports are walked with ``ast`` (nothing is
imported), each top-level module mapped to the distributions that install it
(``importlib.metadata.packages_distributions``), the standard library and ringmaster itself
left out (a module not installed here is taken to come from the distribution of its own
name). An import at a module's top level needs ``[project].dependencies``; one inside a
function (imported only when a feature is used: ``--plot``) may name an optional extra instead.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "ringmaster"

NOT_OURS = {
    "transformers": "progress.HuggingFaceCallback subclasses the training script's own "
    "transformers.TrainerCallback: it exists only where the script already runs a Trainer, "
    "and is imported only when the callback is made",
    "torch": "profiling/payload.py runs in the user's own training image, which brings PyTorch "
    "(a PoolProfile mounts it there); it imports torch only inside its measuring functions",
}
"""Modules imported but deliberately not installed by ringmaster, and why."""


@dataclass(frozen=True)
class Import:
    where: str  # file:line
    module: str  # as written
    lazy: bool  # inside a function: imported only when it runs


def imports(root: Path = PACKAGE) -> Iterator[Import]:
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        yield from _walk(tree, path.relative_to(ROOT).as_posix(), lazy=False)


def _walk(node: ast.AST, where: str, lazy: bool) -> Iterator[Import]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import):
            for alias in child.names:
                yield Import(f"{where}:{child.lineno}", alias.name, lazy)
        elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
            yield Import(f"{where}:{child.lineno}", child.module, lazy)
        inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _walk(child, where, inner)


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"pyproject.toml: cannot read the requirement {requirement!r}"
    return normalized(match.group(1))


def declared() -> tuple[set[str], set[str]]:
    """(the required distributions, those of the optional extras)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    required = {requirement_name(r) for r in project.get("dependencies", [])}
    optional = {
        requirement_name(r)
        for extra in project.get("optional-dependencies", {}).values()
        for r in extra
    }
    return required, optional


def undeclared() -> list[str]:
    """One line per module that imports what pyproject.toml does not declare."""
    providers = importlib.metadata.packages_distributions()
    required, optional = declared()
    problems = []
    for found in imports():
        top = found.module.split(".")[0]
        if top in sys.stdlib_module_names or top == "ringmaster" or top in NOT_OURS:
            continue
        # Not installed here (an optional extra left out): the module's own name is the guess.
        distributions = {normalized(d) for d in providers.get(top, [top])}
        allowed = required | optional if found.lazy else required
        if not distributions & allowed:
            names = " or ".join(sorted(distributions))
            where = (
                "[project].dependencies or an optional extra"
                if found.lazy
                else "[project].dependencies"
            )
            problems.append(f"{found.where} imports {found.module} ({names}): not in {where}")
    return problems


def test_every_imported_distribution_is_declared_in_pyproject() -> None:
    problems = undeclared()
    assert not problems, "pyproject.toml does not declare what the package imports:\n" + (
        "\n".join(problems)
    )


def test_the_walk_sees_imports_at_every_depth() -> None:
    """The walk itself: top-level, nested and lazy imports, relative ones left out."""
    tree = ast.parse(
        "import a.b\n"
        "from c import d\n"
        "from . import e\n"
        "if True:\n    import f\n"
        "def g():\n    import h\n"
        "class K:\n    async def m(self):\n        from i.j import k\n"
    )
    found = {(i.module, i.lazy) for i in _walk(tree, "x.py", lazy=False)}
    assert found == {
        ("a.b", False),
        ("c", False),
        ("f", False),
        ("h", True),
        ("i.j", True),
    }
    assert requirement_name("pydantic>=2.11  ") == "pydantic"
    assert requirement_name("PyYAML>=6") == "pyyaml"
    assert requirement_name("prometheus_client[twisted]>=0.20") == "prometheus-client"
