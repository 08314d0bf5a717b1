"""A pipeline's stages written out layer by layer: Megatron-Core's
``--pipeline-model-parallel-layout`` (megatron/core/transformer/pipeline_parallel_layer_layout.py,
NVIDIA/Megatron-LM @ d98e8a6; docs/user-guide/features/pipeline_parallel_layout.md).

The string lists the model's chunks in order, ``|`` between them: ``E`` the embedding, ``t`` a
decoder layer, ``m`` a multi-token-prediction module, ``L`` the loss (with the LM head); ``x*n``
and ``(...)*n`` repeat, commas and spaces are cosmetic. Chunk ``i`` runs on pipeline rank
``i mod p`` as its virtual stage ``i div p``, so a layout of ``p v`` chunks is ``p`` ranks of
``v`` interleaved chunks. DeepSeek-V3's recipe, ``Et*3|(tt|)*29,m|L`` on 16 ranks: rank 0 holds
the embedding and 3 + 2 layers, ranks 1-13 hold 4, rank 14 2 and the MTP module, rank 15 2 and
the loss.

What the engine takes from it (:class:`StageSplit`): the decoder layers (and MTP modules, each
counted as one of the model's layers, as engine.llm_memory.stage_layers does) on the first rank,
the most on any rank between, and on the last; the virtual stages. The checks are Megatron's
(``validate_layer_layout``): the embedding first and once, the loss last and once, every layer
and every MTP module placed, the MTP modules after the last layer and together.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# Megatron-Core's unrolling, innermost parentheses first, then single symbols.
_GROUP = re.compile(r"\(([^()]+)\)\*(\d+)")
_SYMBOL = re.compile(r"(.)\*(\d+)")
SYMBOLS = "EtmL"
# Longest string a layout may unroll to: a bound on what a typo (``t*99999``) can cost.
MAX_UNROLLED = 100_000


class StageSplit(NamedTuple):
    """Layers per pipeline rank as a layout writes them (MTP modules counted as layers)."""

    pipeline: int
    virtual_stages: int
    first: int  # rank 0's layers (with the embedding)
    middle: int  # the most on any rank between the first and the last (0 when p <= 2)
    last: int  # rank p - 1's layers (with the loss and the LM head)
    written: str = ""  # the layout as the spec wrote it


class LayoutError(ValueError):
    """A layout that does not describe the model on the pipeline: says which rule and where."""


def unroll(layout: str) -> list[str]:
    """The layout's chunks, each a string of symbols (``Et*3|(tt|)*2,m|L`` ->
    ``["Ettt", "tt", "tt", "m", "L"]``)."""
    text = layout.replace(",", "").replace(" ", "")
    while True:
        expanded = _GROUP.sub(lambda g: g.group(1) * int(g.group(2)), text)
        if expanded == text:
            break
        text = expanded
        if len(text) > MAX_UNROLLED:
            raise LayoutError(f"pipelineLayout unrolls to more than {MAX_UNROLLED:,} symbols")
    text = _SYMBOL.sub(lambda g: g.group(1) * int(g.group(2)), text)
    if len(text) > MAX_UNROLLED:
        raise LayoutError(f"pipelineLayout unrolls to more than {MAX_UNROLLED:,} symbols")
    bad = sorted(set(text) - set(SYMBOLS + "|"))
    if bad:
        raise LayoutError(
            f"pipelineLayout: unknown symbol(s) {' '.join(repr(b) for b in bad)} (E embedding, t "
            "decoder layer, m MTP module, L loss, | between stages, x*n and (...)*n repeat)"
        )
    return text.split("|")


def stage_split(layout: str, pipeline: int, layers: int, mtp_layers: int = 0) -> StageSplit:
    """The layout's layers per rank on ``pipeline`` ranks, checked against the model's
    ``layers`` and ``mtp_layers`` (:class:`LayoutError` naming the rule it breaks)."""
    chunks = unroll(layout)
    if pipeline < 1 or len(chunks) % pipeline:
        raise LayoutError(
            f"pipelineLayout has {len(chunks)} stages, not a multiple of pipeline {pipeline} "
            "(each rank runs stages / pipeline interleaved chunks)"
        )
    flat = "".join(chunks)
    if not flat.startswith("E") or flat.count("E") != 1:
        raise LayoutError("pipelineLayout must begin with the embedding E, once")
    if not flat.endswith("L") or flat.count("L") != 1:
        raise LayoutError("pipelineLayout must end with the loss L, once")
    if flat.count("t") != layers:
        raise LayoutError(
            f"pipelineLayout places {flat.count('t')} decoder layers (t); the model has {layers}"
        )
    if flat.count("m") != mtp_layers:
        raise LayoutError(
            f"pipelineLayout places {flat.count('m')} MTP modules (m); the model has "
            f"{mtp_layers} (architecture.mtpLayers)"
        )
    if "m" in flat and "t" in flat[flat.index("m") :]:
        raise LayoutError("pipelineLayout places a decoder layer after an MTP module")
    holding = [c for c in chunks if "m" in c]
    if len(holding) > 1:
        raise LayoutError("pipelineLayout must keep every MTP module in one stage")
    virtual = len(chunks) // pipeline
    per_rank = [0] * pipeline
    for i, chunk in enumerate(chunks):
        per_rank[i % pipeline] += chunk.count("t") + chunk.count("m")
    middle = max(per_rank[1:-1]) if pipeline > 2 else 0
    return StageSplit(pipeline, virtual, per_rank[0], middle, per_rank[-1], layout)


__all__ = ["LayoutError", "StageSplit", "stage_split", "unroll"]
