"""A training launcher's flags in a TrainingJob's pod template, read against the layout the plan
chose.

An LLM job's plan chooses the layout (tensor, pipeline, context and expert degrees, the
micro-batch, the global batch, virtual pipeline stages, the recompute policy) and hands it to the
workers as ``RINGMASTER_*`` variables (manifests.training.LAYOUT_ENV); the launcher passes them
to the framework's own flags (README, "LLM training layouts"). A flag that sets one of them to a
literal other than the plan's makes the gang run another layout than the one planned, priced and
admitted, without a word. Some switches change the step in ways the spec states (the
tensor-parallel collectives' overlap, spec.parallelism.tensorOverlap; torchtitan's recompute early
stop, spec.framework.recomputeStopsEarly), and some in ways the plan does not model (it charges
the pipeline's sends as exposed: overlapping them makes the run faster than planned). So, where
the command line starts a launcher this module knows:

* **planned** settings (each framework's own name for them): the plan's variable, or any
  ``RINGMASTER_*`` one, directly or through a script's ``NAME=$RINGMASTER_...`` or the
  container's env, is what the plan expects; so is a literal equal to the plan's value. Another
  literal is a **conflict**, named with the plan's value and the variable to pass. A value that
  ends in a variable the command line does not define cannot be checked and is left alone;
* **stated in the spec**: a literal that contradicts the spec's setting is a conflict, named
  with the setting to state (the plan's step is the spec's);
* **not modelled**: the pipeline-send overlap switches, named with what the plan assumes;
* everything else (model shapes, data, optimizer, logging...) is the spec's to state or has no
  bearing on the layout, and is not read.

The launchers: Megatron-LM (``pretrain_gpt.py`` and its siblings, ``--tensor-model-parallel-size``
...), NeMo 1 and Megatron-Bridge's Hydra overrides (``model.tensor_model_parallel_size=4``),
torchtitan (``-m torchtitan.train``, ``--parallelism.tensor_parallel_degree``; tyro's dashed
spelling too), MaxText (``MaxText/train.py`` or ``-m MaxText.train``, ``ici_tensor_parallelism=4``
overrides). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ringmaster.planning.command_line import (
    command_words,
    options,
    overrides,
    program_words,
    resolve,
    same,
    shell_assignments,
)

TP = "RINGMASTER_TENSOR_PARALLEL"
PP = "RINGMASTER_PIPELINE_PARALLEL"
CP = "RINGMASTER_CONTEXT_PARALLEL"
EP = "RINGMASTER_EXPERT_PARALLEL"
ETP = "RINGMASTER_EXPERT_TENSOR_PARALLEL"
REPLICAS = "RINGMASTER_DATA_REPLICAS"
MICRO = "RINGMASTER_MICRO_BATCH_SIZE"
GLOBAL = "RINGMASTER_GLOBAL_BATCH_SIZE"
VIRTUAL = "RINGMASTER_VIRTUAL_PIPELINE_STAGES"
RECOMPUTE = "RINGMASTER_ACTIVATION_RECOMPUTE"
RECOMPUTE_LAYERS = "RINGMASTER_RECOMPUTE_LAYERS"
OFFLOAD_LAYERS = "RINGMASTER_ACTIVATION_OFFLOAD_LAYERS"
VOCAB_TILING = "RINGMASTER_VOCAB_TILING"
MOMENTS = "RINGMASTER_OPTIMIZER_MOMENTS_DTYPE"

# The spec's settings a launcher's switches must agree with (planning.plausibility passes the
# plan's values under these paths).
EARLY_STOP = "framework.recomputeStopsEarly"
TENSOR_OVERLAP = "parallelism.tensorOverlap"
IOTA_EMBED = "parallelism.iotaEmbed"
PARAMETER_DTYPE = "model.parameterDType"
GRAD_OVERLAP = "parallelism.overlapGradientReduction"
GRAD_OVERLAP_ENV = "RINGMASTER_OVERLAP_GRAD_REDUCE"
_PP_EXPOSED = "the plan charges the pipeline's sends as exposed"


@dataclass(frozen=True)
class Launcher:
    name: str
    starts: Callable[[list[str], int], int]  # words the entrypoint takes at i (0: not here)
    style: str  # "options" (--flag value) or "overrides" (key=value)
    planned: Mapping[str, str]  # the framework's name -> the plan's variable
    not_modelled: Mapping[str, str]  # switch -> what the plan assumes instead
    # The recompute policy's setting and its values' names in the plan (README's table,
    # engine.llm_layout_names.RECOMPUTES); a value not in it is one the engine does not model.
    recompute: tuple[str, Mapping[str, str]] | None = None
    # Switches that train in a low precision: name -> (precision, the value word that means it;
    # "" for a switch or any value): what spec.model.computePrecision must then say.
    precision: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # Switches of what the run does that the spec states: name -> (its path under spec, the
    # value a bare switch means); the plan's step is the spec's setting.
    spec_switches: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # Of those, the ones that never take a value (argparse's store_true).
    bare_switches: frozenset[str] = frozenset()
    # Spec switches whose absence from the line means a setting: name -> (its path under spec,
    # what absence means, the plan's variable a line passes it by instead).
    absent_switches: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    # Of the spec switches, those that take a word, not a boolean: name -> {its word: the
    # spec's}.
    value_names: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def _script(*suffixes: str) -> Callable[[list[str], int], int]:
    return lambda w, i: int(any(w[i].endswith(s) for s in suffixes))


def _module(*names: str) -> Callable[[list[str], int], int]:
    return lambda w, i: 2 if w[i] == "-m" and i + 1 < len(w) and w[i + 1] in names else 0


def _either(*tests: Callable[[list[str], int], int]) -> Callable[[list[str], int], int]:
    return lambda w, i: next((n for n in (t(w, i) for t in tests) if n), 0)


MEGATRON = Launcher(
    "Megatron-LM",
    _script("pretrain_gpt.py", "pretrain_mamba.py", "pretrain_bert.py", "pretrain_t5.py"),
    "options",
    {
        "--tensor-model-parallel-size": TP,
        "--pipeline-model-parallel-size": PP,
        "--context-parallel-size": CP,
        "--expert-model-parallel-size": EP,
        "--expert-tensor-parallel-size": ETP,
        "--micro-batch-size": MICRO,
        "--global-batch-size": GLOBAL,
        "--num-virtual-stages-per-pipeline-rank": VIRTUAL,
        "--recompute-num-layers": RECOMPUTE_LAYERS,
        "--cpu-offloading-num-layers": OFFLOAD_LAYERS,
        # Megatron-Core's precision-aware optimizer: Adam's moments' dtype
        "--exp-avg-dtype": MOMENTS,
        "--exp-avg-sq-dtype": MOMENTS,
    },
    {"--overlap-p2p-communication": _PP_EXPOSED},
    ("--recompute-granularity", {"full": "Full", "selective": "Selective"}),
    {"--fp8-format": ("fp8", ""), "--fp4-format": ("fp4", "")},
    {
        "--tp-comm-overlap": (TENSOR_OVERLAP, "true"),
        "--overlap-grad-reduce": (GRAD_OVERLAP, "true"),
    },
    frozenset({"--tp-comm-overlap", "--overlap-grad-reduce"}),
    # Megatron-LM reduces the gradients after backward unless told (arguments.py:
    # --overlap-grad-reduce, store_true)
    {"--overlap-grad-reduce": (GRAD_OVERLAP, "false", GRAD_OVERLAP_ENV)},
)
# NeMo 1 (megatron_gpt_pretraining.py with Hydra) and Megatron-Bridge's run scripts: overrides of
# the model's and the trainer's config, wherever they appear on the line.
NEMO = Launcher(
    "NeMo / Megatron-Bridge",
    lambda w, i: 0,  # read over the whole line (classify)
    "overrides",
    {
        "model.tensor_model_parallel_size": TP,
        "model.pipeline_model_parallel_size": PP,
        "model.context_parallel_size": CP,
        "model.expert_model_parallel_size": EP,
        "model.expert_tensor_parallel_size": ETP,
        "model.micro_batch_size": MICRO,
        "model.global_batch_size": GLOBAL,
        "model.virtual_pipeline_model_parallel_size": VIRTUAL,
        "train.micro_batch_size": MICRO,
        "train.global_batch_size": GLOBAL,
        "model.recompute_num_layers": RECOMPUTE_LAYERS,
        "model.activations_checkpoint_num_layers": RECOMPUTE_LAYERS,
        "model.cpu_offloading_num_layers": OFFLOAD_LAYERS,
    },
    {"model.overlap_p2p_comm": _PP_EXPOSED},
    (
        "model.activations_checkpoint_granularity",
        {"full": "Full", "selective": "Selective", "null": "None"},
    ),
    {"model.fp8": ("fp8", "true")},
    {
        "model.ub_tp_comm_overlap": (TENSOR_OVERLAP, "true"),
        "comm_overlap.tp_comm_overlap": (TENSOR_OVERLAP, "true"),
        "ddp.overlap_grad_reduce": (GRAD_OVERLAP, "true"),
    },
)
TORCHTITAN = Launcher(
    "torchtitan",
    _either(_module("torchtitan.train"), _script("torchtitan/train.py")),
    "options",
    {
        "--parallelism.tensor_parallel_degree": TP,
        "--parallelism.pipeline_parallel_degree": PP,
        "--parallelism.context_parallel_degree": CP,
        "--parallelism.expert_parallel_degree": EP,
        "--parallelism.expert_tensor_parallel_degree": ETP,
        "--parallelism.data_parallel_replicate_degree": REPLICAS,
        "--training.local_batch_size": MICRO,
        "--training.global_batch_size": GLOBAL,
    },
    {},
    # torchtitan's selective AC defaults to its op-level policy (selective_ac_option "op")
    ("--activation_checkpoint.mode", {"full": "Full", "none": "None", "selective": "SelectiveOp"}),
    {"--model.converters": ("fp8", "float8")},
    # tyro's booleans: --name [true|false], or the --no_ form
    {
        "--activation_checkpoint.early_stop": (EARLY_STOP, "true"),
        "--activation_checkpoint.no_early_stop": (EARLY_STOP, "false"),
        "--parallelism.enable_async_tensor_parallel": (TENSOR_OVERLAP, "true"),
        "--parallelism.no_enable_async_tensor_parallel": (TENSOR_OVERLAP, "false"),
    },
)
MAXTEXT = Launcher(
    "MaxText",
    _either(_module("MaxText.train", "maxtext.train"), _script("MaxText/train.py")),
    "overrides",
    {
        "ici_tensor_parallelism": TP,
        "ici_pipeline_parallelism": PP,
        "ici_context_parallelism": CP,
        "ici_expert_parallelism": EP,
        "per_device_batch_size": MICRO,
        "num_vocab_tiling": VOCAB_TILING,
    },
    {},
    (
        "remat_policy",
        {
            "full": "Full",
            "none": "None",
            "minimal": "Minimal",
            "save_dot_except_mlp": "SaveDotExceptMlp",
            "save_dot_except_mlpwi": "SaveDotExceptMlpwi",
            "minimal_with_context": "MinimalWithContext",
            "minimal_flash": "MinimalWithContext",  # its name before minimal_with_context
            "qkv_proj_offloaded": "QkvProjOffloaded",
            "minimal_offloaded": "MinimalOffloaded",
        },
    ),
    spec_switches={
        "use_iota_embed": (IOTA_EMBED, "true"),
        "weight_dtype": (PARAMETER_DTYPE, ""),
    },
    value_names={"weight_dtype": {"float32": "fp32", "bfloat16": "bf16"}},
)
LAUNCHERS = (MEGATRON, TORCHTITAN, MAXTEXT, NEMO)
_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


@dataclass(frozen=True)
class Conflict:
    setting: str
    value: str
    planned: str
    variable: str
    whose: str = "the plan chose"
    remedy: str = ""  # what to do instead, where it is not passing the plan's variable

    def describe(self) -> str:
        remedy = self.remedy or f"pass ${self.variable}"
        return f"{self.setting} {self.value} where {self.whose} {self.planned} ({remedy})"


@dataclass(frozen=True)
class TrainingFlags:
    launcher: str
    conflicts: tuple[Conflict, ...]
    not_modelled: tuple[tuple[str, str], ...]  # (switch, what the plan assumes)
    # (the switch as written, the precision it trains in) where the launcher states one
    precision: tuple[str, str] | None = None

    def conflict_message(self) -> str:
        return (
            f"{self.launcher} settings of the layout set to another value than the plan's: "
            + "; ".join(c.describe() for c in self.conflicts)
        )

    def ignored_message(self) -> str:
        return f"{self.launcher} switches the plan does not model: " + "; ".join(
            f"{name} ({why})" for name, why in self.not_modelled
        )


def _normalise(name: str, style: str) -> str:
    """torchtitan's tyro takes ``--parallelism.tensor-parallel-degree`` for the underscored
    spelling: compare the field names with underscores."""
    if style != "options" or "." not in name:
        return name
    return "--" + name[2:].replace("-", "_")


def classify(
    command: Sequence[str] | None,
    args: Sequence[str] | None,
    layout_env: Mapping[str, str],
    env: Mapping[str, str] | None = None,
    spec_settings: Mapping[str, str] | None = None,
) -> TrainingFlags | None:
    """The layout flags of the first launcher the command line starts, against the plan's
    variables (``layout_env``: manifests.training.layout_env of the plan, as a mapping), the
    container's ``env`` and the framework settings the plan's step assumed
    (``spec_settings``: EARLY_STOP / TENSOR_OVERLAP / IOTA_EMBED -> "true" / "false"). None
    where no known launcher starts."""
    words = command_words(command, args)
    variables = {**(env or {}), **shell_assignments(words)}
    for launcher in LAUNCHERS:
        # Hydra's overrides may follow any program of the script (`cd /work && python3 ...`)
        found = words if launcher is NEMO else program_words(words, launcher.starts)
        if found is None:
            continue
        pairs = (
            options(found, {*launcher.not_modelled, *launcher.bare_switches})
            if launcher.style == "options"
            else [(k, v) for k, v in overrides(found)]
        )
        if launcher is NEMO and not any(
            k in NEMO.planned or k in NEMO.not_modelled for k, _ in pairs
        ):
            continue  # no override of the layout on the line: not a NeMo / Bridge launch
        conflicts: list[Conflict] = []
        ignored: list[tuple[str, str]] = []
        precision: tuple[str, str] | None = None
        seen = {_normalise(raw, launcher.style) for raw, _ in pairs}
        for name, (spec_field, absent, passed_as) in launcher.absent_switches.items():
            if name in seen or any(passed_as in w for w in found):
                continue  # stated on the line, or passed as the plan's variable
            conflict = _against_spec(
                name,
                "(absent)",
                absent,
                spec_field,
                spec_settings or {},
                f" or pass ${{{passed_as}:+{name}}}",
            )
            if conflict is not None:
                conflicts.append(conflict)
        for raw, value in pairs:
            name = _normalise(raw, launcher.style)
            if name in launcher.precision:
                low, word = launcher.precision[name]
                if not word or (value is not None and word in value.strip().lower()):
                    precision = (f"{raw} {value}" if value is not None else raw, low)
                continue
            if name in launcher.not_modelled:
                if value is None or value.strip().lower() in _TRUE:
                    ignored.append((raw, launcher.not_modelled[name]))
                continue
            if name in launcher.spec_switches:
                conflict = _spec_switch(
                    raw,
                    value,
                    launcher.spec_switches[name],
                    spec_settings or {},
                    launcher.value_names.get(name),
                )
                if conflict is not None:
                    conflicts.append(conflict)
                continue
            recompute = launcher.recompute is not None and name == launcher.recompute[0]
            variable = RECOMPUTE if recompute else launcher.planned.get(name)
            if variable is None or value is None:
                continue
            final = resolve(value, variables, "RINGMASTER_")
            if final is None or final.startswith("$"):
                continue  # the operator's variable, or one this command line cannot tell
            planned = layout_env.get(variable)
            if launcher.recompute is not None and recompute:
                named = launcher.recompute[1].get(final.strip().lower(), final)
                if planned is not None and named != planned:
                    conflicts.append(Conflict(raw, final, planned, variable))
                continue
            if planned is None or planned == "" or same(final, planned):
                continue
            if launcher is MAXTEXT and same(final, "-1"):
                continue  # MaxText's -1: the degree that fills the rest of the mesh
            conflicts.append(Conflict(raw, final, planned, variable))
        return TrainingFlags(launcher.name, tuple(conflicts), tuple(ignored), precision)
    return None


def _spec_switch(
    raw: str,
    value: str | None,
    meaning: tuple[str, str],
    settings: Mapping[str, str],
    vocabulary: Mapping[str, str] | None = None,
) -> Conflict | None:
    """A switch whose literal disagrees with the spec's setting the plan's step assumed; None
    where it agrees, is not a literal, or the plan assumed nothing. ``vocabulary``: a switch that
    takes a word, its words' values in the spec's terms (MaxText's weight_dtype)."""
    spec_field, bare = meaning
    assumed = settings.get(spec_field)
    if assumed is None:
        return None
    if vocabulary is not None:
        word = vocabulary.get((value or "").strip().lower())
        if value is None or word is None:
            return None  # a word this module cannot read
        return _against_spec(raw, value, word, spec_field, settings)
    if value is None:
        stated = bare
    elif value.strip().lower() in _TRUE | _FALSE:
        on = value.strip().lower() in _TRUE
        stated = "true" if on == (bare == "true") else "false"
    else:
        return None  # a variable or a word this module cannot read
    shown = "(a bare switch)" if value is None else value
    return _against_spec(raw, shown, stated, spec_field, settings)


def _against_spec(
    raw: str,
    shown: str,
    stated: str,
    spec_field: str,
    settings: Mapping[str, str],
    alternative: str = "",
) -> Conflict | None:
    """The line's ``stated`` setting against the spec's the plan's step assumed."""
    assumed = settings.get(spec_field)
    if assumed is None or stated == assumed:
        return None
    return Conflict(
        raw,
        shown,
        assumed,
        f"spec.{spec_field}",
        whose=f"spec.{spec_field} is",
        remedy=f"set spec.{spec_field}: {stated}, which the plan's step then prices{alternative}",
    )


# torchrun's switches (no value); the first word after torchrun's options is the program.
_TORCHRUN_SWITCHES = frozenset(
    {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "-m", "--module"}
)


def _torchrun_options(words: list[str]) -> list[tuple[str, str | None]] | None:
    """torchrun's own options (before the program it runs), or None where none starts."""
    for i, word in enumerate(words):
        module = word == "-m" and i + 1 < len(words) and words[i + 1] == "torch.distributed.run"
        if word != "torchrun" and not module:
            continue
        rest = words[i + (2 if module else 1) :]
        out: list[tuple[str, str | None]] = []
        j = 0
        while j < len(rest) and rest[j].startswith("-"):
            name = rest[j]
            if "=" in name:
                key, value = name.split("=", 1)
                out.append((key, value))
                j += 1
            elif name not in _TORCHRUN_SWITCHES and j + 1 < len(rest):
                out.append((name, rest[j + 1]))
                j += 2
            else:
                out.append((name, None))
                j += 1
        return out
    return None


def torchrun_world(
    command: Sequence[str] | None,
    args: Sequence[str] | None,
    per_worker: int,
    workers: int,
    env: Mapping[str, str] | None = None,
) -> tuple[Conflict, ...]:
    """torchrun's ``--nproc-per-node`` and ``--nnodes`` against the gang: a literal other than
    the accelerators a worker pod gets (PET_NPROC_PER_NODE) or the worker pods
    (PET_NNODES) starts another world than the plan's, with accelerators idle or oversubscribed.
    torchrun's ``gpu`` / ``auto`` and an elastic ``min:max`` range are not literals to check."""
    words = command_words(command, args)
    found = _torchrun_options(words)
    if found is None:
        return ()
    variables = {**(env or {}), **shell_assignments(words)}
    per_pod = ("PET_NPROC_PER_NODE", per_worker, "accelerators", "each worker pod has")
    expected = {
        "--nproc-per-node": per_pod,
        "--nproc_per_node": per_pod,
        "--nnodes": ("PET_NNODES", workers, "worker pods", "the gang has"),
    }
    out = []
    for name, value in found:
        if name not in expected or value is None:
            continue
        final = resolve(value, variables, "PET_")
        if final is None or final.startswith("$") or ":" in final:
            continue
        if final.strip().lower() in ("gpu", "auto", "cpu"):
            continue
        variable, count, unit, whose = expected[name]
        if not same(final, str(count)):
            out.append(Conflict(f"torchrun {name}", final, f"{count} {unit}", variable, whose))
    return tuple(out)
