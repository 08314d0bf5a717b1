"""The bad-input table without a cluster, and the promise that parse_manifest refuses what the
apiserver refuses.

``OfflineAdmission`` evaluates a generated CRD the way the apiserver does at admission, as far as
this API uses it: structural defaulting, the OpenAPI schema (types, bounds, enums, patterns,
required, list-map keys), unknown fields (kubectl's strict field validation) and the
``x-kubernetes-validations`` CEL rules (with cel-python, plus the Kubernetes ``split`` string
extension). It reads the YAML in crds/, not the models, so it checks what the apiserver will get.
The e2e test (tests/e2e/test_admission.py) checks the same table against a real apiserver.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy import celtypes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringmaster.api import (
    GROUP,
    RESOURCES,
    ManifestError,
    parse_manifest,
    validate_update,
)
from ringmaster.api.common import DNS_SUBDOMAIN
from tests.e2e.test_admission import (
    BAD_INPUT_DOC,
    ROWS,
    BadInput,
    example_files,
    load_example,
    render_bad_input_doc,
)

pytestmark = pytest.mark.unit

CRD_DIR = Path(__file__).resolve().parents[2] / "crds"
Error = tuple[str, str, str]  # (layer, path, message)


def _k8s_format(template: Any, args: Any) -> celtypes.StringType:
    # Kubernetes' CEL strings extension: '%d and %s'.format([...]) (the messageExpressions use
    # it: string(int) has no size bound, and the apiserver refuses its estimated cost).
    values = iter(list(args))
    text = re.sub(
        r"%([ds%])", lambda m: "%" if m.group(1) == "%" else str(next(values)), str(template)
    )
    return celtypes.StringType(text)


def _k8s_split(value: Any, separator: Any) -> celtypes.ListType:
    # Kubernetes' CEL strings extension (not in cel-python).
    return celtypes.ListType([celtypes.StringType(p) for p in str(value).split(str(separator))])


class OfflineAdmission:
    def __init__(self, crd: dict[str, Any]) -> None:
        [version] = crd["spec"]["versions"]
        self.schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
        self.env = celpy.Environment()
        self.programs: dict[str, Any] = {}

    def admit(self, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[Error]:
        errors: list[Error] = []
        obj = self._default(self.schema, copy.deepcopy(obj))
        old = self._default(self.schema, copy.deepcopy(old)) if old is not None else None
        if old is not None:
            # An update of the main resource keeps the stored status (the status subresource).
            obj.pop("status", None)
            if "status" in old:
                obj["status"] = copy.deepcopy(old["status"])
        name = obj.get("metadata", {}).get("name", "")
        if not (isinstance(name, str) and len(name) <= 253 and re.match(DNS_SUBDOMAIN, name)):
            errors.append(("name", "metadata.name", "Invalid value"))
        for key in ("spec", "status"):
            if key in obj:
                node = self.schema["properties"][key]
                self._validate(node, obj[key], key, (old or {}).get(key), errors)
            elif key in self.schema.get("required", []):
                errors.append(("schema", key, "Required value"))
        if not errors:  # the object's own rules (at the root, where status is visible)
            self._validate_cel(self.schema, _object_view(obj), "", _object_view(old), errors)
        return errors

    def _default(self, schema: dict[str, Any], value: Any) -> Any:
        if isinstance(value, dict) and "properties" in schema:
            for key, child in schema["properties"].items():
                if key not in value and "default" in child:
                    value[key] = copy.deepcopy(child["default"])
                if key in value:
                    value[key] = self._default(child, value[key])
        elif isinstance(value, list) and "items" in schema:
            return [self._default(schema["items"], v) for v in value]
        return value

    def _validate(
        self, s: dict[str, Any], v: Any, path: str, old: Any, errors: list[Error]
    ) -> None:
        before = len(errors)
        self._validate_value(s, v, path, old, errors)
        if len(errors) == before:  # CEL runs on values the schema accepted
            self._validate_cel(s, v, path, old, errors)

    def _validate_value(
        self, s: dict[str, Any], v: Any, path: str, old: Any, errors: list[Error]
    ) -> None:
        def fail(message: str) -> None:
            errors.append(("schema", path, message))

        # Like the apiserver, a whole-valued number is an integer (JSON 8.0, YAML 3.4e8).
        is_int = (isinstance(v, int) and not isinstance(v, bool)) or (
            isinstance(v, float) and v.is_integer()
        )
        if s.get("x-kubernetes-int-or-string"):
            if not (is_int or isinstance(v, str)):
                return fail("must be of type integer or string")
        else:
            expected = s["type"]
            ok = {
                "object": isinstance(v, dict),
                "array": isinstance(v, list),
                "string": isinstance(v, str),
                "integer": is_int,
                "number": is_int or isinstance(v, float),
                "boolean": isinstance(v, bool),
            }[expected]
            if not ok:
                return fail(f"must be of type {expected}")
        if "enum" in s and v not in s["enum"]:
            fail("Unsupported value")
        if isinstance(v, str):
            if len(v) > s.get("maxLength", len(v)) or len(v) < s.get("minLength", 0):
                fail("length out of bounds")
            if "pattern" in s and not re.search(s["pattern"], v):
                fail("should match pattern")
        if is_int or isinstance(v, float):
            if "minimum" in s and (
                v <= s["minimum"] if s.get("exclusiveMinimum") else v < s["minimum"]
            ):
                fail("below minimum")
            if "maximum" in s and v > s["maximum"]:
                fail("above maximum")
        if isinstance(v, list):
            if len(v) > s.get("maxItems", len(v)):
                fail("too many items")
            keys = s.get("x-kubernetes-list-map-keys")
            seen: set[tuple[Any, ...]] = set()
            if s.get("x-kubernetes-list-type") == "set" and len(set(map(repr, v))) < len(v):
                fail("duplicate entries in a set")
            for i, item in enumerate(v):
                self._validate(s["items"], item, f"{path}[{i}]", None, errors)
                if keys and isinstance(item, dict):
                    key = tuple(item.get(k) for k in keys)
                    if key in seen:
                        errors.append(("schema", f"{path}[{i}]", "Duplicate value"))
                    seen.add(key)
        if isinstance(v, dict):
            if len(v) > s.get("maxProperties", len(v)):
                fail("too many properties")
            for key in s.get("required", []):
                if key not in v:
                    errors.append(("schema", f"{path}.{key}", "Required value"))
            properties = s.get("properties", {})
            for key, item in v.items():
                child_path = f"{path}.{key}"
                old_item = old.get(key) if isinstance(old, dict) else None
                if key in properties:
                    self._validate(properties[key], item, child_path, old_item, errors)
                elif isinstance(s.get("additionalProperties"), dict):
                    self._validate(s["additionalProperties"], item, child_path, None, errors)
                elif not s.get("x-kubernetes-preserve-unknown-fields"):
                    errors.append(("strict", child_path, f'unknown field "{child_path}"'))

    def _validate_cel(
        self, s: dict[str, Any], v: Any, path: str, old: Any, errors: list[Error]
    ) -> None:
        rules = s.get("x-kubernetes-validations", [])
        if not rules:
            return
        # One conversion of the value (and of the old one) for all the node's rules: converting
        # per rule was a fifth of the hypothesis tests' time.
        this = _to_cel(s, v)
        before = _to_cel(s, old) if old is not None else None
        for rule in rules:
            is_transition = "oldSelf" in rule["rule"]
            if is_transition and old is None:
                continue  # transition rules run only on update
            activation = {"self": this}
            if is_transition:
                activation["oldSelf"] = before
            try:
                ok = self._program(rule["rule"]).evaluate(activation)
            except Exception as exc:  # an evaluation error refuses the object too
                ok = f"evaluation error: {exc}"
            if (ok is not True and not isinstance(ok, celtypes.BoolType)) or not ok:
                message = rule["message"]
                if "messageExpression" in rule:
                    message = str(self._program(rule["messageExpression"]).evaluate(activation))
                where = (path + rule.get("fieldPath", "")).lstrip(".")
                errors.append(("cel", where, message))

    def _program(self, rule: str) -> Any:
        if rule not in self.programs:
            self.programs[rule] = self.env.program(
                self.env.compile(rule), functions={"split": _k8s_split, "format": _k8s_format}
            )
        return self.programs[rule]


def _object_view(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """The object as root-level CEL sees it: spec and status (metadata is not used by rules)."""
    if obj is None:
        return None
    return {k: obj[k] for k in ("spec", "status") if k in obj}


def _to_cel(s: dict[str, Any], v: Any) -> Any:
    """JSON to CEL by the schema: `number` fields are doubles even when written as 25, and
    `integer` fields are ints even when written as 8.0."""
    return celpy.json_to_cel(_typed_numbers(s, v))


def _typed_numbers(s: dict[str, Any], v: Any) -> Any:
    if s.get("type") == "number" and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    integer = s.get("type") == "integer" or s.get("x-kubernetes-int-or-string")
    if integer and isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        props = s.get("properties", {})
        extra = s.get("additionalProperties")
        return {
            _cel_name(k): _typed_numbers(
                props.get(k) or (extra if isinstance(extra, dict) else {}), x
            )
            for k, x in v.items()
        }
    if isinstance(v, list):
        return [_typed_numbers(s.get("items", {}), x) for x in v]
    return v


# Property names that are CEL reserved words: Kubernetes escapes them as __name__ in rules
# (apiextensions-apiserver's CEL escaping of property names), so a rule reads
# self.__namespace__ for a field named namespace.
_CEL_RESERVED = frozenset(
    [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)


def _cel_name(key: str) -> str:
    return f"__{key}__" if key in _CEL_RESERVED else key


ADMISSION = {
    kind: OfflineAdmission(yaml.safe_load((CRD_DIR / f"{r.plural}.{GROUP}.yaml").read_text()))
    for kind, r in RESOURCES.items()
}


def offline_admit(doc: dict[str, Any], old: dict[str, Any] | None = None) -> list[Error]:
    return ADMISSION[doc["kind"]].admit(doc, old)


def python_errors(doc: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    try:
        if old is None:
            parse_manifest(doc)
        else:
            validate_update(old, doc)
    except ManifestError as exc:
        return [e.path for e in exc.errors]
    return []


# --- the table ---------------------------------------------------------------------------


def test_the_table_has_at_least_15_rows_with_unique_names() -> None:
    assert len(ROWS) >= 15
    assert len({r.name for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("example", example_files())
def test_examples_pass_both_the_crd_and_parse_manifest(example: str) -> None:
    doc = load_example(example)
    assert offline_admit(doc) == []
    assert python_errors(doc) == []


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_bad_input_is_refused_by_the_crd_at_the_field_and_layer_the_table_says(
    row: BadInput,
) -> None:
    old = row.stored() if row.update else None
    if old is not None:
        assert offline_admit(old) == []
    errors = offline_admit(row.manifest(), old)
    assert any(row.field in path for _, path, _ in errors), errors
    assert row.check in {layer for layer, path, _ in errors if row.field in path}, errors


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_bad_input_is_refused_by_parse_manifest_naming_the_field(row: BadInput) -> None:
    old = row.stored() if row.update else None
    with pytest.raises(ManifestError) as exc:
        if old is None:
            parse_manifest(row.manifest())
        else:
            validate_update(old, row.manifest())
    assert row.field in str(exc.value)


CEL_ROWS = [r for r in ROWS if r.check == "cel"]


@pytest.mark.parametrize("row", CEL_ROWS, ids=[r.name for r in CEL_ROWS])
def test_a_rules_message_is_the_same_from_parse_manifest_and_the_crd(row: BadInput) -> None:
    old = row.stored() if row.update else None
    crd_messages = {m for _, path, m in offline_admit(row.manifest(), old) if path == row.field}
    with pytest.raises(ManifestError) as exc:
        if old is None:
            parse_manifest(row.manifest())
        else:
            validate_update(old, row.manifest())
    python_messages = {e.message for e in exc.value.errors if e.path == row.field}
    assert python_messages, exc.value
    assert python_messages <= crd_messages, (python_messages, crd_messages)


def test_docs_bad_input_is_generated_from_the_table() -> None:
    assert BAD_INPUT_DOC.read_text() == render_bad_input_doc(ROWS), (
        "docs/bad-input.md is stale: run `python -m tests.e2e.test_admission`"
    )


# --- the same verdict on many more manifests -----------------------------------------------

# Hardware that fits together; the test starts from one and may break each part of it, so both
# verdicts (and every rule) are reached often.
VALID_HARDWARE = [
    ("nvidia-tesla-a100", 8, None, 8),
    ("nvidia-tesla-a100", 16, None, 2),
    ("nvidia-h200-141gb", 8, None, 4),
    ("nvidia-b200", 8, None, 2),
    ("nvidia-tesla-t4", 1, None, 8),
    ("nvidia-l4", 2, None, 4),  # not in the built-in catalog: the API accepts it all the same
    ("tpu-v5p-slice", 4, "2x2x4", 4),
    ("tpu-v6e-slice", 4, "4x4", 4),
    ("tpu7x", 4, "2x2x2", 2),
    ("tpu-v4-podslice", 4, "2x2x4", 4),
    ("tpu-v4-podslice", 4, "2x2x1", 1),
    ("tpu-v5-lite-podslice", 4, "2x4", 2),
    ("tpu-v5-lite-podslice", 8, "2x4", 1),
    ("tpu-v3-slice", 4, "4x4", 4),
    ("tpu-v2", 4, "2x2", 1),
]
MISSING = "<missing>"


def maybe(*values: Any) -> st.SearchStrategy[Any]:
    """Usually keep the valid value (None), sometimes replace it."""
    return st.one_of(st.none(), st.none(), st.sampled_from(values))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hardware=st.sampled_from(VALID_HARDWARE),
    workers=maybe(0, 2, 3, 16, 3000, 4.0, 2.5),
    accelerator=maybe(
        "nvidia-tesla-a100",
        "nvidia-gb200",
        "tpu-v4-podslice",
        "tpu7x",
        "NVIDIA-A100",
        "nvidia_a100",
        "nvidia--a100",
        "-tpu",
        "a" * 64,
        "",
    ),
    per_worker=maybe(0, 1, 3, 4, 8, 16, 17, 8.0, 4.5),
    topology=maybe(MISSING, "2x2x4", "4x4", "2x4", "1x1", "2x2x2x2", "0x4", "axb"),
    slices=maybe(0, 1, 2, 3, 4, 300),
    strategy=st.sampled_from(["Auto", "Ring", "ReductionServer", "Tree"]),
    reducers=st.sampled_from(
        [None, None, {"poolName": "p"}, {"replicas": 4}, {"replicas": 4, "poolName": "p"}]
    ),
    compute=st.sampled_from([(None, "783G"), (0.3, None), (0.3, "783G"), (None, None)]),
)
def test_parse_manifest_and_the_crd_agree_on_training_jobs(
    hardware: tuple[str, int, str | None, int],
    workers: int | None,
    accelerator: str | None,
    per_worker: int | None,
    topology: str | None,
    slices: int | None,
    strategy: str,
    reducers: dict[str, Any] | None,
    compute: tuple[float | None, str | None],
) -> None:
    doc = load_example("trainingjob-bert-large-auto.yaml")
    spec = doc["spec"]
    base_type, base_per_worker, base_topology, base_workers = hardware
    spec["workers"] = base_workers if workers is None else workers
    spec["accelerator"] = {
        "type": accelerator or base_type,
        "perWorker": base_per_worker if per_worker is None else per_worker,
    }
    chosen_topology = base_topology if topology is None else topology
    if chosen_topology not in (None, MISSING):
        spec["accelerator"]["topology"] = chosen_topology
    if slices is not None:
        spec["accelerator"]["slices"] = slices
        if workers is None and slices in (2, 4):  # often a valid multislice job
            spec["workers"] = base_workers * slices
    spec["communication"] = {"strategy": strategy}
    if reducers is not None:
        spec["communication"]["reductionServer"] = reducers
    spec["model"].pop("flopsPerSample")
    seconds, flops = compute
    if seconds is not None:
        spec["model"]["computeSecondsPerStep"] = seconds
    if flops is not None:
        spec["model"]["flopsPerSample"] = flops
    _assert_same_verdict(doc)


@settings(max_examples=200, deadline=None)
@given(
    per_replica=st.integers(min_value=0, max_value=9),
    min_replicas=st.integers(min_value=-1, max_value=12),
    max_replicas=st.integers(min_value=0, max_value=12),
    replicas=st.one_of(st.none(), st.integers(min_value=-1, max_value=14)),
    latency=st.sampled_from([-5, 0, 0.0, 0.5, 25, 600001]),
    rate=st.sampled_from([0, 0.5, 4000, 10**8]),
)
def test_parse_manifest_and_the_crd_agree_on_inference_endpoints(
    per_replica: int,
    min_replicas: int,
    max_replicas: int,
    replicas: int | None,
    latency: float,
    rate: float,
) -> None:
    doc = load_example("inferenceendpoint-resnet50-int8-t4.yaml")
    spec = doc["spec"]
    spec["accelerator"]["perReplica"] = per_replica
    spec["minReplicas"], spec["maxReplicas"] = min_replicas, max_replicas
    if replicas is not None:
        spec["replicas"] = replicas
    spec["slo"] = {"targetRequestsPerSecond": rate, "latencyP99Milliseconds": latency}
    _assert_same_verdict(doc)


FIT, TP, STAGES, BELOW_STAGES = "fit", "tp", "stages", "below-stages"


@settings(max_examples=400, deadline=None)
@given(
    per_replica=st.sampled_from([1, 2, 3, 4, 8, 16, 24, 32, 600]),
    hosts=st.one_of(st.none(), st.integers(min_value=0, max_value=5)),
    tensor=st.one_of(st.none(), st.sampled_from([0, 1, 2, 4, 8, 16, 32, 600])),
    pipeline=st.one_of(st.none(), st.sampled_from([0, 1, 2, 3, 4, 32, 100, FIT, FIT])),
    expert=st.one_of(st.none(), st.sampled_from([1, 2, 4, 5, 8, 16, 32, TP, TP, TP, FIT])),
    heads=st.sampled_from([40, 64, 128]),
    experts=st.sampled_from([None, None, 1, 6, 8, 16, 128]),
    layers=st.sampled_from([80, 80, 12, STAGES, STAGES, BELOW_STAGES]),
    attention_data=st.one_of(
        st.none(), st.none(), st.sampled_from([0, 1, 2, 3, 4, 8, 16, FIT, FIT])
    ),
    redundant=st.one_of(st.none(), st.sampled_from([0, 1, 2, 8, 32])),
    dispatch=st.sampled_from([None, None, "DeepEP", "AllToAll"]),
)
def test_parse_manifest_and_the_crd_agree_on_serving_parallelism(
    per_replica: int,
    hosts: int | None,
    tensor: int | None,
    pipeline: int | str | None,
    expert: int | str | None,
    heads: int,
    experts: int | None,
    layers: int | str,
    attention_data: int | str | None,
    redundant: int | None,
    dispatch: str | None,
) -> None:
    """Every rule on spec.parallelism (tensor, pipeline and expert against perReplica, the
    layers, the heads and the experts): the same verdict, field and message from the CRD's CEL
    and from parse_manifest, on dense models and mixtures of experts. FIT makes pipeline
    perReplica / tensor (expert: perReplica) and TP the expert the tensor-parallel degree, so
    the rules that read the degrees are reached with the others passing; STAGES makes the
    layers the pipeline stages the spec fixes (BELOW_STAGES: one fewer). Wide expert
    parallelism (attentionData, FIT: perReplica / tensor; redundantExperts; expertDispatch)
    joins them."""
    if attention_data == FIT:
        attention_data = per_replica // tensor if tensor else per_replica
    if pipeline == FIT:
        pipeline = per_replica // tensor if tensor else None
    if expert == FIT:
        expert = per_replica
    elif expert == TP:
        stages = pipeline if isinstance(pipeline, int) and pipeline > 0 else 1
        expert = tensor or per_replica // stages or None
    doc = load_example("inferenceendpoint-llama3-70b-a100-tp4.yaml")
    spec = doc["spec"]
    spec["accelerator"]["perReplica"] = per_replica
    if hosts is not None:
        spec["accelerator"]["hostsPerReplica"] = hosts
    given = (
        ("tensor", tensor),
        ("pipeline", pipeline),
        ("expert", expert),
        ("attentionData", attention_data),
        ("redundantExperts", redundant),
        ("expertDispatch", dispatch),
    )
    parallelism = {k: v for k, v in given if v is not None}
    if parallelism:
        spec["parallelism"] = parallelism
    arch = spec["model"]["architecture"]
    arch["attentionHeads"], arch["kvHeads"], arch["hiddenSize"] = heads, 8, heads * 128
    if isinstance(layers, str):
        if isinstance(pipeline, int) and pipeline > 0:
            stages = pipeline
        else:
            stages = per_replica // tensor if tensor else 1
        layers = max(1, stages - (layers == BELOW_STAGES))
    arch["layers"] = layers
    if experts is not None:
        arch["experts"], arch["activeExperts"] = experts, 1
    _assert_same_verdict(doc)
    _assert_same_rule_messages(doc)


@settings(max_examples=200, deadline=None)
@given(
    parameters=st.one_of(
        st.integers(min_value=-10, max_value=10**17),
        st.from_regex(r"\A[0-9]{1,5}(\.[0-9]{0,4})?[KMGBTkmb]?\Z"),
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
    )
)
def test_parse_manifest_and_the_crd_agree_on_counts(parameters: Any) -> None:
    doc = load_example("trainingjob-bert-large-auto.yaml")
    doc["spec"]["model"]["parameters"] = parameters
    _assert_same_verdict(doc)


def _assert_same_rule_messages(doc: dict[str, Any]) -> None:
    """Where parse_manifest refuses by a rule, a CEL rule refuses at that field with the same
    message (messageExpression included)."""
    cel = {(path, message) for layer, path, message in offline_admit(doc) if layer == "cel"}
    try:
        parse_manifest(doc)
    except ManifestError as exc:
        for error in exc.errors:
            if any(path == error.path for path, _ in cel):
                assert (error.path, error.message) in cel, (error, cel)


def _assert_same_verdict(doc: dict[str, Any]) -> None:
    crd_paths = {path for _, path, _ in offline_admit(doc)}
    python_paths = set(python_errors(doc))
    assert bool(crd_paths) == bool(python_paths), (crd_paths, python_paths)
    # The apiserver reports every failing rule; pydantic stops at the first one per object and
    # skips an object's rules when a field already failed. What Python names, the CRD names.
    assert python_paths <= crd_paths, (python_paths, crd_paths)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workers=st.integers(min_value=1, max_value=4),
    tensor=st.sampled_from([1, 2, 4, 8, 3, "Auto"]),
    pipeline=st.sampled_from([1, 2, 4, 32, 5, "Auto"]),
    micro_batch=st.sampled_from([1, 2, 3, 4, "Auto"]),
    context=st.sampled_from([1, 2, 4, 3, "Auto"]),
    global_batch=st.one_of(st.none(), st.integers(min_value=1, max_value=256)),
)
def test_parse_manifest_and_the_crd_agree_on_batches_that_split(
    workers: int,
    tensor: int | str,
    pipeline: int | str,
    micro_batch: int | str,
    context: int | str,
    global_batch: int | None,
) -> None:
    """The global batch over the data-parallel replicas (accelerators / (tensor x context x
    pipeline)): the CEL rule and its Python twin, verdict and message (its arithmetic)."""
    doc = load_example("trainingjob-llama3-8b-fsdp-h100.yaml")
    spec = doc["spec"]
    spec["workers"] = workers
    spec["parallelism"].update(
        {"tensor": tensor, "pipeline": pipeline, "microBatchSize": micro_batch, "context": context}
    )
    if global_batch is None:
        spec["parallelism"].pop("globalBatchSize")
        spec["model"]["batchSizePerAccelerator"] = 1
    else:
        spec["parallelism"]["globalBatchSize"] = global_batch
    _assert_same_verdict(doc)
    _assert_same_rule_messages(doc)
