"""`ringmaster crds`: write the CRDs generated from the models, one file per CRD."""

from __future__ import annotations

import argparse
from pathlib import Path

from ringmaster.api.crds import all_crds, render
from ringmaster.api.reference import render_reference


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output-dir", default="crds", help="directory to write the CRD files into (crds)"
    )
    parser.add_argument(
        "--reference",
        metavar="FILE",
        help="also write the API reference (Markdown) generated from the models, e.g. docs/api.md",
    )


def write_crds(output_dir: Path) -> list[Path]:
    """Write every CRD into ``output_dir`` and return the paths written."""
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, crd in all_crds().items():
        path = output_dir / name
        path.write_text(render(crd), encoding="utf-8")
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    for path in write_crds(Path(args.output_dir)):
        print(path)
    if args.reference:
        Path(args.reference).write_text(render_reference(), encoding="utf-8")
        print(args.reference)
    return 0
