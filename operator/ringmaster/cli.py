"""The `ringmaster` command line.

Each subcommand lives in its own module, which exposes ``add_arguments(parser)`` and
``run(args) -> int``; the module is imported only when its command runs, so `ringmaster plan`
never pays for kopf or the Kubernetes client.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ringmaster import __version__

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("ringmaster.controllers.main", "run the operator (kopf) against the current cluster"),
    "plan": ("ringmaster.planning.command", "print what the operator would decide for a manifest"),
    "calibrate": (
        "ringmaster.calibration.command",
        "compare the engine with published measurements",
    ),
    "collective": (
        "ringmaster.collective",
        "what nccl-tests should print on given hosts, or check a real run (--compare)",
    ),
    "bench": (
        "ringmaster.planning.bench",
        "what a benchmark harness's closed loop should measure on an LLM endpoint's replica",
    ),
    "crds": ("ringmaster.api.crdgen", "write the CustomResourceDefinitions generated from the API"),
    "cluster": ("ringmaster.localcluster", "bring the local kwok control plane up or down"),
}

EXIT_USAGE = 2


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ringmaster", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"ringmaster {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if only in (None, name):
            module = importlib.import_module(module_name)
            module.add_arguments(command_parser)
            command_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # Import only the module of the command being run; `--help` alone imports none.
    chosen = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(only=chosen if chosen in COMMANDS else "")
    args = parser.parse_args(args_list)
    result: int = args._run(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
