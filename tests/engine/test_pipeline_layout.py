"""A pipeline written out stage by stage (Megatron-Core's --pipeline-model-parallel-layout,
issue 42's free staging): parsing, Megatron's checks, the layers per rank, and the step."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.engine import llm_training as L
from ringmaster.engine.frameworks import framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_SELECTIVE
from ringmaster.engine.llm_memory import stage_layers
from ringmaster.engine.pipeline_layout import LayoutError, stage_split, unroll
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

DEEPSEEK = KNOWN_TRANSFORMERS["deepseek-v3"]  # 61 layers, one MTP module


@pytest.mark.parametrize(
    ("layout", "chunks"),
    [
        # Megatron-Core's parse_str_to_list docstring and its unrolling examples
        ("Et*3|(tt|)*2,m|L", ["Ettt", "tt", "tt", "m", "L"]),
        ("E||t|L", ["E", "", "t", "L"]),
        ("(|ab)*2".replace("a", "t").replace("b", "t"), ["", "tt", "tt"]),
        ("Et*7|t*7mL", ["Ettttttt", "tttttttmL"]),
    ],
)
def test_unroll_as_megatron_does(layout: str, chunks: list[str]) -> None:
    assert unroll(layout) == chunks


def test_deepseek_v3s_recipe_on_16_ranks_by_hand() -> None:
    """Megatron's documented rank map for Et*3|(tt|)*29,m|L at PP 16 (two chunks a rank):
    rank 0 the embedding and 3 + 2 layers, ranks 1-13 2 + 2, rank 14 2 and the MTP module,
    rank 15 2 and the loss."""
    split = stage_split("Et*3|(tt|)*29,m|L", 16, 61, 1)
    assert (split.pipeline, split.virtual_stages) == (16, 2)
    assert (split.first, split.middle, split.last) == (5, 4, 2)
    assert split.written == "Et*3|(tt|)*29,m|L"


@pytest.mark.parametrize(
    ("layout", "pipeline", "words"),
    [
        ("Et*3|(tt|)*29,m|L", 5, "not a multiple of pipeline 5"),
        ("t*3|(tt|)*29,m|EL", 16, "begin with the embedding E"),
        ("Et*3|(tt|)*29,m|", 16, "end with the loss L"),
        ("Et*2|(tt|)*29,m|L", 16, "places 60 decoder layers (t); the model has 61"),
        ("Et*3|(tt|)*29,t|L", 16, "places 62 decoder layers"),
        ("Et*3|(tt|)*29,x|L", 16, "unknown symbol(s) 'x'"),
        ("Et*3|(tt|)*28,m|tt|L", 16, "decoder layer after an MTP module"),
    ],
)
def test_megatrons_checks_name_the_rule(layout: str, pipeline: int, words: str) -> None:
    with pytest.raises(LayoutError, match=re_escape(words)):
        stage_split(layout, pipeline, 61, 1)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_a_written_split_replaces_the_engines_at_its_own_degree_only() -> None:
    split = stage_split("Et*3|(tt|)*29,m|L", 16, 61, 1)
    model = replace(DEEPSEEK, stage_split=split)
    stages = stage_layers(model, np.array([8.0, 16.0]))
    default = stage_layers(DEEPSEEK, np.array([8.0, 16.0]))
    assert (float(stages.first[1]), float(stages.middle[1]), float(stages.last[1])) == (5, 5, 2)
    # the middle takes the first's count where it is the busier (its memory an upper bound)
    assert float(stages.middle[0]) == float(default.middle[0])
    assert float(stages.last[0]) == float(default.last[0])


def test_the_written_layouts_busiest_rank_sets_the_pace() -> None:
    """The engine's own split at PP 16 gives DeepSeek-V3 3, 4 and 3 layers (the last with the MTP
    module and the head); the recipe gives rank 0 five (3 + 2 over its two chunks), and that rank
    sets the pace: the micro-batches' compute is 5 / 4 of the engine's split's."""
    host = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8)
    hw = L.layout_hardware(host, 32, DEFAULT_CATALOG, framework=framework("Megatron"))
    base = dict(
        tensor=1,
        pipeline=16,
        sharding=1,
        micro_batch=1,
        recompute=RECOMPUTE_SELECTIVE,
        global_batch=1024,
        expert=16,
        virtual_stages=2,
    )
    written = replace(DEEPSEEK, stage_split=stage_split("Et*3|(tt|)*29,m|L", 16, 61, 1))
    own = L.evaluate_layouts(DEEPSEEK, hw, **base)  # type: ignore[arg-type]
    recipe = L.evaluate_layouts(written, hw, **base)  # type: ignore[arg-type]
    ratio = float(recipe.compute_seconds) / float(own.compute_seconds)
    assert ratio == pytest.approx(5 / 4, rel=1e-9)
