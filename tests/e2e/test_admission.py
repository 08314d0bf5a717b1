"""The API at admission, on a real apiserver: every row of tests/e2e/bad_input.yaml is refused
with a message that names the field, and every example is accepted unchanged.

The table is also the source of docs/bad-input.md (``python -m tests.e2e.test_admission``
rewrites it; a unit test fails when it is stale) and of the unit tests that check parse_manifest
and the CRDs' rules offline.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import TRAINING_JOB, parse_manifest
from ringmaster.planning import plausibility
from tests.e2e.kube import Cluster

REPO = Path(__file__).resolve().parents[2]
TABLE = Path(__file__).with_name("bad_input.yaml")
EXAMPLES = REPO / "examples"
BAD_INPUT_DOC = REPO / "docs" / "bad-input.md"


@dataclass(frozen=True)
class BadInput:
    name: str
    base: str
    field: str
    check: str
    why: str
    set: dict[str, Any] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    update: bool = False
    status: dict[str, Any] | None = None
    """For an update: the status the stored object has (the operator's, written through the
    status subresource) when the change is applied."""

    def base_manifest(self) -> dict[str, Any]:
        return load_example(self.base)

    def stored(self) -> dict[str, Any]:
        """The base as the apiserver holds it when the update arrives: with this row's status."""
        doc = self.base_manifest()
        if self.status is not None:
            doc["status"] = copy.deepcopy(self.status)
        return doc

    def manifest(self) -> dict[str, Any]:
        """The base example with this row's change applied."""
        doc = self.base_manifest()
        for path, value in self.set.items():
            *parents, last = path.split(".")
            node = doc
            for key in parents:
                node = node.setdefault(key, {})
            node[last] = copy.deepcopy(value)
        for path in self.unset:
            *parents, last = path.split(".")
            node = doc
            for key in parents:
                node = node[key]
            del node[last]
        return doc

    def change_text(self) -> str:
        parts = [f"`{k}: {json.dumps(v)}`" for k, v in self.set.items()]
        parts += [f"remove `{p}`" for p in self.unset]
        if self.update and self.status:
            phase = self.status.get("phase")
            return ", ".join(parts) + f" (as an update of a job in phase {phase})"
        return ", ".join(parts) + (" (as an update)" if self.update else "")


def load_table() -> list[BadInput]:
    rows = yaml.safe_load(TABLE.read_text())
    return [BadInput(**{**r, "unset": tuple(r.get("unset", ()))}) for r in rows]


def load_example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def example_files() -> list[str]:
    """The examples, and the ones `make demo` does not apply (profiles/: no payload runs on the
    local cluster's simulated hosts; alternatives/: a job that may run on several
    accelerators), relative to examples/."""
    found = [
        *EXAMPLES.glob("*.yaml"),
        *EXAMPLES.glob("profiles/*.yaml"),
        *EXAMPLES.glob("alternatives/*.yaml"),
    ]
    return sorted(str(p.relative_to(EXAMPLES)) for p in found)


ROWS = load_table()

_LAYERS = {
    "schema": "OpenAPI schema (type, bounds, enum, required)",
    "cel": "CEL rule (`x-kubernetes-validations`)",
    "strict": "strict field validation (unknown field)",
    "name": "object metadata",
}


def render_bad_input_doc(rows: list[BadInput]) -> str:
    lines = [
        "# What the API refuses, and why",
        "",
        "Generated from [`tests/e2e/bad_input.yaml`](../tests/e2e/bad_input.yaml) by",
        "`python -m tests.e2e.test_admission`; do not edit by hand. Each row starts from a file",
        "of [`examples/`](../examples), makes one change, and is refused by the apiserver at",
        "admission (`kubectl apply` fails and nothing is stored) with a message naming the field.",
        "`ringmaster plan` refuses the same manifests with the same field path, before any",
        "cluster is involved. `tests/e2e/test_admission.py` applies every row to a real apiserver.",
        "",
        "| # | change | starting from | refused at | by | why |",
        "|---|---|---|---|---|---|",
    ]
    for i, row in enumerate(rows, 1):
        lines.append(
            f"| {i} | {row.change_text()} | `{row.base}` | `{row.field}` | "
            f"{_LAYERS[row.check]} | {row.why} |"
        )
    lines += [
        "",
        "Valid manifests are accepted unchanged: every example is applied with a server-side dry",
        "run and comes back with the fields it was sent, plus the documented defaults",
        "([api.md](api.md)).",
        "",
        "## Editing a running TrainingJob",
        "",
        "A gang is placed once, on one pool, in the shape its spec gives at admission; its pods",
        "cannot move or change shape. So the apiserver refuses an edit of that shape while the",
        "gang holds its pool (`status.phase` Admitted or Running), with a message naming the",
        "field; the rules are CEL at the CRD's root, where `status` is visible. To change it,",
        "suspend the job (`runPolicy.suspend: true`, in the same update or before): its pods go,",
        "and the next gang takes the new shape. A waiting (Pending), suspended or finished job",
        "may be edited freely (a Pending job with `NoMatchingPool` is fixed by editing it).",
        "",
        "| field | may change | why |",
        "|---|---|---|",
    ]
    lines += [f"| `spec.{c.field}` | {c.when} | {c.why} |" for c in TRAINING_JOB.spec_changes]
    lines += [
        "",
        "## Accepted, then held by the operator",
        "",
        "The accelerator is open: any name of the GKE label form is accepted, and what the",
        "operator's hardware catalog ([catalog.md](catalog.md)) does not define is judged by the",
        "operator. The job or endpoint is stored but waits, creating nothing, with a Warning",
        "Event and `Schedulable=False` (TrainingJob) or `Ready=False` (InferenceEndpoint) giving",
        "the reason; it goes on by itself once the catalog ConfigMap defines the hardware.",
        "",
        "| reason | field | when |",
        "|---|---|---|",
        "| `UnknownAccelerator` | `spec.accelerator.type` | the catalog has no such accelerator "
        "(the message lists the known ones and how to add one) |",
        "| `UnsupportedHostShape` | `spec.accelerator.perWorker` / `perReplica` | no machine type "
        "of the catalog carries that many of the accelerator (3 x A100), or a serving replica's "
        "perReplica is no whole number of hosts (12 x H100 on 8-GPU hosts) |",
        "| `UnsupportedTopology` | `spec.accelerator.topology` | a 2-D topology for a 3-D TPU "
        "(`4x4` for tpu-v4-podslice) or the reverse |",
        "",
        "An InferenceEndpoint is also held, creating nothing, with `Ready=False` and a Warning",
        "Event, when the cluster's pools cannot build its replicas:",
        "",
        "| reason | field | when |",
        "|---|---|---|",
        "| `UnsupportedHostShape` | `spec.accelerator.perReplica` | a replica across hosts needs "
        "hosts of exactly its per-host share (one pod per host takes the whole host), and the "
        "accelerator's pools have hosts of other sizes (12 x H100 planned as 3 x 4 on a pool of "
        "8-GPU hosts); the message lists the pools and their hosts |",
        "| `PoolTooSmall` | `spec.accelerator.perReplica` | the pool's schedulable hosts cannot "
        "hold one replica (a group of 3 hosts on a pool of 2); when they hold some of the "
        "desired replicas, the workload is created and `Schedulable=False PoolTooSmall` says "
        "how many run and how many wait |",
        "| `PrecisionUnsupported` | `spec.precision` / `spec.kvCachePrecision` | the accelerator "
        "lacks the precision's tensor cores (FP4 on an H100, FP8 on an A100); the model itself "
        "may fit |",
        "| `ApplyRefused` | - | the API server refused one of the endpoint's objects (a Service "
        "of its name that another controller owns): the message names the object and quotes "
        "the server; tried again every 30 s |",
        "",
        "What only the engine can judge is left to the operator too: whether an LLM's weights and",
        "KV cache fit a replica's memory, and whether any replica meets the latency targets. Such",
        "an endpoint is stored and planned, and `CapacityMet=False` gives the reason",
        "(`ModelDoesNotFit`, `LatencyTargetUnreachable`) with the numbers. Its parallelism",
        "(tensor, pipeline, expert) is judged at admission (the rows above).",
        "",
        "## Accepted, with a warning",
        "",
        "Some input is valid but almost surely a slip. It is accepted, planned, and reported as",
        "a warning naming the field (`ringmaster plan` prints it under the table and lists it in",
        "`-o json` as `warnings`; `planning/plausibility.py` has the checks and their sources):",
        "",
        "| reason | field | when |",
        "|---|---|---|",
        "| `ImplausibleParameterCount` | `spec.model.parameters` | more than "
        f"{plausibility.IMPLAUSIBLE_PARAMETER_FACTOR:g} x the largest published model "
        f"({plausibility.LARGEST_PUBLISHED_PARAMETERS:.4g} parameters) |",
        "| `ExceedsAcceleratorMemory` | `spec.model.parameters` | weights and gradients alone do "
        "not fit the memory of all the gang's accelerators, even fully sharded |",
        "| `ImplausibleStepTime` | the input behind most of the step | the predicted step takes "
        f"longer than {plausibility.LONGEST_PLAUSIBLE_STEP_SECONDS:g} s (a day) |",
        "| `NcclSettingIgnored` | `spec.template.env` | an `NCCL_*` variable the engine does not "
        "model, named (docs/engine.md) |",
        "| `XlaSettingIgnored` | `spec.template.env` | a JAX job on GPUs (MaxText): an `XLA_*` "
        "variable the plan does not read, a flag of `XLA_FLAGS` other than "
        "`--xla_disable_hlo_passes=rematerialization` (by name), or "
        "`XLA_PYTHON_CLIENT_ALLOCATOR=platform` (its allocations' cost); the memory fraction and "
        'the remat flag are modelled (docs/llm-training.md, "JAX\'s memory pool") |',
        "| `FP8SlowerThanBF16` | `spec.model.computePrecision` | FP8 whose scaling runs op by op "
        "(torchtitan or plain PyTorch with `spec.framework.compile` off) is predicted slower than "
        "the same layout in bf16; the message gives both steps and the compiled one "
        "(docs/llm-training.md, the lent H100's eager FP8 steps) |",
        "| `LauncherWorldMismatch` | `spec.template.args` | a TrainingJob's torchrun starts "
        "another world than the gang's: `--nproc-per-node` other than each worker pod's "
        "accelerators, or `--nnodes` other than the worker pods (`gpu`, `auto` and an elastic "
        "`min:max` are not checked; pass `$PET_NPROC_PER_NODE` and `$PET_NNODES`) |",
        "| `LayoutFlagConflicts` | `spec.template.args` | a TrainingJob's launcher (Megatron-LM, "
        "NeMo or Megatron-Bridge overrides, torchtitan, MaxText) sets a layout setting (tensor, "
        "pipeline, context or expert degree, micro-batch, global batch, virtual stages, the "
        "recompute policy in the launcher's own words) to a literal other than the plan's: the "
        "setting, its value, the plan's and the variable to pass (planning/training_flags.py) |",
        "| `PrecisionFlagConflicts` | `spec.model.computePrecision` | the launcher trains in FP8 "
        "or FP4 (Megatron's `--fp8-format` / `--fp4-format`, NeMo's `model.fp8=True`, "
        "torchtitan's `--model.converters float8`) where `computePrecision` says otherwise: the "
        "plan is the other precision's step |",
        "| `LayoutFlagIgnored` | `spec.template.args` | a launcher switch the plan does not model: "
        "Megatron's `--overlap-p2p-communication`, NeMo's `overlap_p2p_comm` (the plan charges "
        "the pipeline's sends as exposed). Megatron's `--tp-comm-overlap`, NeMo's "
        "`ub_tp_comm_overlap`, torchtitan's async tensor parallelism and its recompute early stop "
        "are stated in the spec (`parallelism.tensorOverlap`, `framework.recomputeStopsEarly`): a "
        "switch that contradicts the spec is a `LayoutFlagConflicts` |",
        "| `ServingEngineMismatch` | `spec.template.args` | the command line starts another "
        "engine's server than the plan's (`spec.engine: SGLang` with `vllm serve`): the memory "
        "split, scheduler and kernels planned are not the ones that run |",
        "| `ServingEnvIgnored` | `spec.template.env` | the engine's own variables (`VLLM_*`, "
        "`SGLANG_*`, `TLLM_*`) that may change how it runs (`VLLM_USE_V1`, "
        "`VLLM_ATTENTION_BACKEND`...), named; logging, ports, caches and usage statistics pass |",
        "| `ServingFlagConflicts` | `spec.template.args` | the server's command line sets what "
        "the plan chooses (tensor degree, max-num-seqs, token budget, context length, KV cache "
        "dtype) to a literal other than the plan's: the flag, its value, the plan's and the "
        "`RINGMASTER_*` variable to pass instead (planning/serving_flags.py) |",
        "| `ServingFlagIgnored` | `spec.template.args` | a flag of vLLM's, SGLang's or "
        "TensorRT-LLM's server that the plan does not model (`--enforce-eager`, prefix caching, "
        "speculative decoding, a memory split other than the engine's default...), named with "
        "its value: the plan assumes the engine's default |",
        "| `NcclSettingIgnored` | `spec.template.env` | on an InferenceEndpoint, any `NCCL_*` "
        "variable that may change performance: the serving step times each engine's own "
        "tensor-parallel all-reduce at its defaults |",
        "",
    ]
    return "\n".join(lines)


def _apply(cluster: Cluster, namespace: str, doc: dict[str, Any], *extra: str) -> Any:
    return cluster.kubectl(
        "apply", "-n", namespace, *extra, "-f", "-", input=json.dumps(doc), check=False
    )


@pytest.mark.e2e
@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_bad_input_is_refused_at_admission_naming_the_field(
    crds_installed: Cluster, namespace: str, row: BadInput, request: pytest.FixtureRequest
) -> None:
    doc = row.manifest()
    if row.update:
        if row.status is not None:
            # The status is written here as the operator would write it; an operator running
            # in the cluster would write its own over it (Pending, when an earlier test's gang
            # holds the pool) before the update arrives, and the update would be accepted.
            request.getfixturevalue("no_session_operator")
        created = _apply(crds_installed, namespace, row.base_manifest())
        assert created.returncode == 0, created.stderr
        if row.status is not None:
            set_status(crds_installed, namespace, doc, row.status)
    result = _apply(crds_installed, namespace, doc)
    assert result.returncode != 0, f"{row.name}: accepted, expected a refusal\n{result.stdout}"
    assert row.field in result.stderr, (
        f"{row.name}: message does not name {row.field}:\n{result.stderr}"
    )
    if not row.update:
        # Refused at admission: nothing was stored.
        kind = doc["kind"].lower()
        name = doc["metadata"]["name"]
        got = crds_installed.kubectl("get", kind, name, "-n", namespace, check=False)
        assert got.returncode != 0 and "NotFound" in got.stderr, got.stdout
    else:
        stored = crds_installed.get_json(
            doc["kind"].lower(), doc["metadata"]["name"], "-n", namespace
        )
        assert stored["spec"] == _merged(row.base_manifest()["spec"], stored["spec"])


@pytest.mark.e2e
def test_a_suspension_is_lifted_only_once_the_job_is_suspended(
    crds_installed: Cluster, namespace: str, no_session_operator: None
) -> None:
    """suspend: true with a new shape, then suspend: false before the operator acted, would leave
    the old gang running under the new shape; the apiserver refuses the second step until the
    status says Suspended (written here as the operator would)."""
    doc = load_example("trainingjob-bert-large-auto.yaml")
    doc["spec"]["runPolicy"]["suspend"] = True
    assert _apply(crds_installed, namespace, doc).returncode == 0
    set_status(crds_installed, namespace, doc, {"phase": "Running", "pool": "a100-highgpu-8g"})
    resume = json.dumps({"spec": {"runPolicy": {"suspend": False}}})
    name = doc["metadata"]["name"]
    args = ("patch", "tj", name, "-n", namespace, "--type=merge", "-p", resume)
    refused = crds_installed.kubectl(*args, check=False)
    assert refused.returncode != 0 and "spec.runPolicy.suspend" in refused.stderr
    assert "wait for phase Suspended" in refused.stderr
    set_status(crds_installed, namespace, doc, {"phase": "Suspended"})
    crds_installed.kubectl(*args)
    stored = crds_installed.get_json("tj", name, "-n", namespace)
    assert stored["spec"]["runPolicy"]["suspend"] is False


def set_status(cluster: Cluster, namespace: str, doc: dict[str, Any], status: Any) -> None:
    """Write ``status`` as the operator does: through the status subresource."""
    cluster.kubectl(
        "patch",
        doc["kind"].lower(),
        doc["metadata"]["name"],
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def _merged(sent: Any, stored: Any) -> Any:
    """``stored`` if it carries every value of ``sent`` unchanged (defaults may be added)."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        assert set(sent) <= set(stored), f"pruned: {set(sent) - set(stored)}"
        return {k: _merged(sent[k], stored[k]) if k in sent else stored[k] for k in stored}
    assert sent == stored, f"changed: sent {sent!r}, stored {stored!r}"
    return stored


@pytest.mark.e2e
@pytest.mark.parametrize("example", example_files())
def test_example_is_accepted_unchanged_with_the_models_defaults(
    crds_installed: Cluster, namespace: str, example: str
) -> None:
    _assert_accepted_unchanged(crds_installed, namespace, load_example(example))


# Valid variants of an example that no example shows, each (base, changes as a row's `set`).
ACCEPTED = {
    "disaggregated-auto-with-prefill-size-and-picker": (
        "inferenceendpoint-llama3-70b-disaggregated-h100.yaml",
        {
            "spec.disaggregation": {"mode": "Auto", "prefill": {"perReplica": 8}},
            "spec.routing": {"endpointPicker": {"name": "epp"}},
        },
    ),
}


@pytest.mark.e2e
@pytest.mark.parametrize("variant", sorted(ACCEPTED))
def test_valid_variant_is_accepted_unchanged_with_the_models_defaults(
    crds_installed: Cluster, namespace: str, variant: str
) -> None:
    base, changes = ACCEPTED[variant]
    doc = BadInput(variant, base, "", "", "", set=changes).manifest()
    _assert_accepted_unchanged(crds_installed, namespace, doc)


def _assert_accepted_unchanged(cluster: Cluster, namespace: str, doc: dict[str, Any]) -> None:
    result = _apply(cluster, namespace, doc, "--dry-run=server", "-o", "json")
    assert result.returncode == 0, result.stderr
    returned = json.loads(result.stdout)["spec"]
    _merged(doc["spec"], returned)  # nothing the user wrote was pruned or changed
    # What the apiserver added are the models' defaults: the CRD and pydantic agree.
    model_view = parse_manifest(doc).spec.to_k8s()
    _assert_added_fields_match(doc["spec"], returned, model_view, "spec")


def _assert_added_fields_match(sent: Any, returned: Any, model: Any, path: str) -> None:
    if isinstance(returned, dict):
        for key, value in returned.items():
            if isinstance(sent, dict) and key in sent:
                _assert_added_fields_match(sent[key], value, model.get(key), f"{path}.{key}")
            else:
                assert model.get(key) == value, (
                    f"{path}.{key}: apiserver {value!r}, model {model.get(key)!r}"
                )


@pytest.mark.e2e
def test_kubectl_get_shows_the_columns_short_names_categories_and_scale(
    crds_installed: Cluster, namespace: str
) -> None:
    for example in example_files():
        crds_installed.apply(load_example(example), namespace)
    tj = crds_installed.kubectl("get", "tj", "-n", namespace).stdout
    header = tj.splitlines()[0].split()
    assert header == [
        "NAME",
        "PHASE",
        "REASON",
        "STRATEGY",
        "WORKERS",
        "PER-WORKER",
        "ACCELERATOR",
        "STEP-SECONDS",
        "OBSERVED",  # issue 33: observed against predicted, progress, ETA, expected start
        "RATIO",
        "PROGRESS",
        "ETA",
        "EXPECTED-START",
        "AGE",
    ]
    assert "bert-large-squad" in tj and "nvidia-tesla-a100" in tj
    ie_header = crds_installed.kubectl("get", "ie", "-n", namespace).stdout.splitlines()[0].split()
    assert ie_header[:6] == ["NAME", "PHASE", "REASON", "REPLICAS", "READY", "CAPACITY-RPS"]
    rsp_header = (
        crds_installed.kubectl("get", "rsp", "-n", namespace).stdout.splitlines()[0].split()
    )
    assert rsp_header == ["NAME", "PHASE", "REASON", "REPLICAS", "READY", "BANDWIDTH-GBPS", "AGE"]
    every = crds_installed.kubectl("get", "ringmaster", "-n", namespace, "-o", "name").stdout
    applied = {
        f"{doc['kind'].lower()}.ringmaster.dev/{doc['metadata']['name']}"
        for doc in map(load_example, example_files())
    }
    # every example is in the category; the session's operator, where an earlier test of this
    # worker started it, may add what a job owns: a job's own reducers
    assert applied <= set(every.split()), sorted(applied - set(every.split()))
    extra = set(every.split()) - applied
    assert all(x.startswith("reductionserverpool.ringmaster.dev/") for x in extra), extra
    # The same for the short category; read apart, so a job's reducers created between the two
    # reads may be in one and not the other (no equality of the two lists: that raced).
    ml = set(crds_installed.kubectl("get", "ml", "-n", namespace, "-o", "name").stdout.split())
    assert applied <= ml, sorted(applied - ml)
    assert all(x.startswith("reductionserverpool.ringmaster.dev/") for x in ml - applied), ml
    # The scale subresource writes spec.replicas, and the CEL bounds apply to it too.
    crds_installed.kubectl("scale", "ie", "resnet50-int8-t4", "-n", namespace, "--replicas=3")
    ie = crds_installed.get_json("ie", "resnet50-int8-t4", "-n", namespace)
    assert ie["spec"]["replicas"] == 3
    too_many = crds_installed.kubectl(
        "scale", "ie", "resnet50-int8-t4", "-n", namespace, "--replicas=50", check=False
    )
    assert too_many.returncode != 0 and "spec.replicas" in too_many.stderr
    crds_installed.kubectl("scale", "rsp", "shared-reducers", "-n", namespace, "--replicas=4")
    assert (
        crds_installed.get_json("rsp", "shared-reducers", "-n", namespace)["spec"]["replicas"] == 4
    )


if __name__ == "__main__":
    BAD_INPUT_DOC.write_text(render_bad_input_doc(ROWS), encoding="utf-8")
    print(BAD_INPUT_DOC)
