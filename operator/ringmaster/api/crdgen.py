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


def run(args: argparse.Namespace) -> int:
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, crd in all_crds().items():
        (out / name).write_text(render(crd), encoding="utf-8")
        print(out / name)
    if args.reference:
        Path(args.reference).write_text(render_reference(), encoding="utf-8")
        print(args.reference)
    return 0
