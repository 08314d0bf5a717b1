"""Activation offloading to host memory: MaxText's remat policies ``qkv_proj_offloaded`` and
``minimal_offloaded`` (TrainingJob ``QkvProjOffloaded`` and ``MinimalOffloaded``).

Both build ``jax.checkpoint_policies.save_and_offload_only_these_names`` with nothing saved on
the device, their names offloaded from ``device`` to ``pinned_host`` (MaxText
src/maxtext/layers/decoders.py ``get_remat_policy`` and src/maxtext/utils/maxtext_utils.py
``get_save_and_offload_names``, AI-Hypercomputer/maxtext @ e591f30). In HBM a layer keeps its
input alone (the scanned decoder layer's carry, as Full: engine.llm_memory.SAVED_ELEMENTS); what
the policy names leaves HBM for the host's DRAM:

- **host memory**: the offloaded tensors of every layer of every micro-batch in flight, per
  accelerator: :func:`host_offload_bytes`, held against the accelerator's share of the host's
  DRAM (:func:`host_memory_per_accelerator`);
- **time**: each offloaded byte crosses the host link twice per micro-batch (device to host in
  forward, host to device in backward). XLA issues the copies asynchronously beside the layer's
  compute, so a layer pays only what its copies take beyond its own compute
  (:func:`exposed_offload_seconds`): engine.step_parts charges it as the micro-batch part
  ``activation offload``.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.efficiency import PCIE_EFFICIENCY
from ringmaster.engine.llm_layout_names import (
    RECOMPUTE_MINIMAL_OFFLOADED,
    RECOMPUTE_QKV_PROJ_OFFLOADED,
    RECOMPUTES,
)
from ringmaster.engine.llm_memory import BYTES_ACTIVATION, layer_input_bytes, stage_layers
from ringmaster.engine.transformer import Transformer
from ringmaster.engine.units import GB, GIB

F64 = NDArray[np.float64]

# What each offloading policy moves to the host per layer and token, in elements of width h,
# h_kv and f, as engine.llm_memory.SAVED_ELEMENTS counts them (h gated / f standard last):
#   QkvProjOffloaded: query_proj, key_proj, value_proj (kv_proj: latent attention's): Q (h),
#     K and V (2 h_kv).
#   MinimalOffloaded: every projection's output, as Minimal saves them (query/key/value/kv/qkv
#     _proj, out_proj, mlpwi_0, mlpwi_1 or mlpwi, mlpwo): Minimal's 4h + 2h_kv + 2f (f) less the
#     layer input, which stays in HBM: 3h + 2h_kv + 2f (f).
OFFLOADED_ELEMENTS: dict[int, tuple[int, int, int, int]] = {  # (h, h_kv, f gated, f standard)
    RECOMPUTE_QKV_PROJ_OFFLOADED: (1, 2, 0, 0),
    RECOMPUTE_MINIMAL_OFFLOADED: (3, 2, 2, 1),
}
OFFLOADING_RECOMPUTES = tuple(RECOMPUTES[code] for code in OFFLOADED_ELEMENTS)

# The link between an accelerator and its host's DRAM, bytes/s per direction, datasheet figures:
#   tpu-v6e-slice: "Each v6e chip ... connects to the host through a PCIe Gen5 interface"
#     (Cloud TPU v6e documentation, "System architecture", docs.cloud.google.com/tpu/docs/v6e,
#     read 2026). The page states no lane count: x16 assumed, which at PCIe 5.0's 32 GT/s with
#     128b/130b encoding (PCI-SIG PCIe Base Specification 5.0) is 32 x 16 x 128/130 / 8 = 63.0 GB/s.
#   nvidia-h100-80gb: "PCIe Gen5: 128 GB/s" ([H100-DS], SXM5, both directions): 64 per direction.
#   nvidia-h200-141gb: "PCIe Gen5: 128 GB/s" ([H200-DS], SXM, both directions): 64.
#   nvidia-tesla-a100, nvidia-a100-80gb: "PCIe Gen4: 64 GB/s" ([A100-DS], both directions): 32.
#   nvidia-b200: "PCIe Gen5: 128 GB/s" ([B200-DS], HGX B200, both directions): 64.
#   nvidia-gb200: NVLink-C2C, "900 GB/s of bidirectional bandwidth" between the Grace CPU and the
#     superchip's two Blackwell GPUs ([GB200-NVL72]): read as shared by the two, 900 / 2 / 2 =
#     225 per GPU and direction (the lower reading; the link is not PCIe, but PCIE_EFFICIENCY,
#     a serial link's overheads, is carried to it).
# An accelerator missing here has no offloading plan: the planner refuses it by name.
HOST_LINK_GBPS_PER_DIRECTION: dict[str, float] = {
    "tpu-v6e-slice": 32.0 * 16 * 128 / 130 / 8,
    "nvidia-h100-80gb": 128.0 / 2,
    "nvidia-h200-141gb": 128.0 / 2,
    "nvidia-tesla-a100": 64.0 / 2,
    "nvidia-a100-80gb": 64.0 / 2,
    "nvidia-b200": 128.0 / 2,
    "nvidia-gb200": 900.0 / 2 / 2,
}

# The host DRAM a chip's offloaded activations can use: its share of the host's DRAM, as the
# Cloud TPU pages state it per host ("DRAM per host" over "Chips per host"): v6e 1536 GiB / 8
# (Cloud TPU v6e documentation, "System architecture"), v5e 512 GiB / 8 (Cloud TPU v5e
# documentation, "System architecture"). An upper bound: the host's runtime and input pipeline
# use some of it. A GPU host's DRAM is not in the catalog: its room goes unchecked (the plan
# still reports the bytes).
HOST_DRAM_GIB_PER_ACCELERATOR: dict[str, float] = {
    "tpu-v6e-slice": 1536.0 / 8,
    "tpu-v5-lite-podslice": 512.0 / 8,
}


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


def offloads(recompute: ArrayLike) -> NDArray[np.bool_]:
    """Where ``recompute`` (codes) moves activations to host memory."""
    return np.isin(np.asarray(recompute), tuple(OFFLOADED_ELEMENTS))


def host_link_bandwidth(accelerator: str) -> float:
    """Achieved bytes/s per direction between ``accelerator`` and its host's DRAM (the
    datasheet's HOST_LINK_GBPS_PER_DIRECTION x PCIE_EFFICIENCY); 0 where unknown."""
    gbps = HOST_LINK_GBPS_PER_DIRECTION.get(accelerator, 0.0)
    return gbps * GB * PCIE_EFFICIENCY


def host_memory_per_accelerator(accelerator: str) -> float:
    """Bytes of host DRAM per accelerator (HOST_DRAM_GIB_PER_ACCELERATOR); inf where unknown,
    so that the room goes unchecked rather than guessed."""
    gib = HOST_DRAM_GIB_PER_ACCELERATOR.get(accelerator)
    return math.inf if gib is None else gib * GIB


def offload_refusal(
    recompute: str,
    accelerator: str,
    offload_layers: int | None = None,
    layer_inputs: bool = False,
) -> str | None:
    """Why ``recompute`` (or Megatron's CPU offloading of ``offload_layers``, or MaxText's
    offloaded ``layer_inputs``) cannot be planned on ``accelerator`` (no host-link figure to
    time its copies by), or None."""
    if accelerator in HOST_LINK_GBPS_PER_DIRECTION:
        return None
    known = ", ".join(sorted(HOST_LINK_GBPS_PER_DIRECTION))
    if layer_inputs:
        return (
            f"offloadLayerInputs offloads every layer's input to host memory over the"
            f" accelerator's host link, and the catalog states no host-link bandwidth for"
            f" {accelerator} (known: {known})"
        )
    if offload_layers:
        return (
            f"activationOffloadLayers offloads activations to host memory over the accelerator's"
            f" host link, and the catalog states no host-link bandwidth for {accelerator}"
            f" (known: {known})"
        )
    if recompute not in OFFLOADING_RECOMPUTES:
        return None
    return (
        f"activationRecompute {recompute} offloads activations to host memory over the "
        f"accelerator's host link, and the catalog states no host-link bandwidth for "
        f"{accelerator} (known: {known}); choose another policy"
    )


def offloaded_elements(model: Transformer, recompute: ArrayLike) -> F64:
    """Elements per token per layer that ``recompute`` moves to the host (0 for the policies
    that offload nothing)."""
    r = np.asarray(recompute)
    table = np.zeros((len(RECOMPUTES), 4))
    for code, row in OFFLOADED_ELEMENTS.items():
        table[code] = row
    row = table[r]
    f = np.where(model.gated_ffn, row[..., 2], row[..., 3])
    return _f(row[..., 0] * model.hidden + row[..., 1] * model.kv_hidden + f * model.ffn_hidden)


def offload_bytes_per_layer(
    model: Transformer,
    micro_batch: ArrayLike,
    tensor: ArrayLike,
    recompute: ArrayLike,
    context: ArrayLike = 1,
    layer_inputs: bool = False,
) -> F64:
    """Bytes one accelerator offloads per layer per micro-batch: OFFLOADED_ELEMENTS x 2 bytes
    (bf16) x its s b / c tokens / t (the tensors are split over the tensor ranks as the saved
    ones are: engine.llm_memory.activation_bytes_per_layer), and the layer's input where
    ``layer_inputs`` (MaxText's ``decoder_layer_input: offload``, under any policy: MaxText's
    custom remat names it beside the policy's own)."""
    tokens = _f(micro_batch) * model.sequence_length / _f(context)
    elements = offloaded_elements(model, recompute)
    own = BYTES_ACTIVATION * elements * tokens / _f(tensor)
    if layer_inputs:
        own = own + layer_input_bytes(model, micro_batch, tensor, context)
    return _f(own)


def host_offload_bytes(
    model: Transformer,
    micro_batch: ArrayLike,
    tensor: ArrayLike,
    pipeline: ArrayLike,
    micro_batches: ArrayLike,
    recompute: ArrayLike,
    virtual_stages: ArrayLike = 1,
    context: ArrayLike = 1,
    layer_inputs: bool = False,
) -> F64:
    """Host bytes per accelerator at the peak: every layer of the stage, for every micro-batch
    in flight, the way HBM holds saved activations (engine.llm_memory.memory_per_accelerator:
    the first stage of a 1F1B pipeline has min(p, m) micro-batches in flight, times
    1 + (p - 1) / (p v) interleaved; the last stage one)."""
    p, m, v = _f(pipeline), _f(micro_batches), _f(virtual_stages)
    stages = stage_layers(model, p)
    per_layer = offload_bytes_per_layer(
        model, micro_batch, tensor, recompute, context, layer_inputs
    )
    interleave = np.where(v > 1, 1.0 + (p - 1.0) / (p * v), 1.0)
    first = stages.first * np.minimum(p, m) * interleave
    return _f(per_layer * np.maximum(first, stages.last))


def exposed_offload_seconds(
    offload_bytes: ArrayLike, host_link: float, layer_seconds: ArrayLike
) -> F64:
    """A layer's copy time beyond its compute, per micro-batch: its ``offload_bytes`` cross the
    host link twice (device to host in forward, host to device in backward), and XLA runs the
    copies as async transfers beside the layer's forward, backward and recompute
    (``layer_seconds``), so only max(0, 2 bytes / bandwidth - compute) is exposed. Over an
    unknown link (``host_link`` 0) nothing is charged: such a layout does not fit
    (:func:`unknown_host_link`) and the planner refuses the policy by name
    (:func:`offload_refusal`)."""
    if host_link <= 0:
        return _f(np.zeros(np.shape(_f(offload_bytes) * _f(layer_seconds))))
    transfer = 2.0 * _f(offload_bytes) / host_link
    return _f(np.maximum(transfer - _f(layer_seconds), 0.0))


def unknown_host_link(
    recompute: ArrayLike, host_link: float, layer_inputs: bool = False
) -> NDArray[np.bool_]:
    """Where an offloading policy (or offloaded ``layer_inputs``) meets a host link the catalog
    does not state: no plan can time its copies, so those layouts do not fit."""
    return np.asarray((offloads(recompute) | layer_inputs) & (host_link <= 0), dtype=bool)


# Megatron-Core's CPU offloading (--cpu-offloading --cpu-offloading-num-layers N, activations
# only, Transformer Engine's get_cpu_offload_context; TrainingJob ``activationOffloadLayers``):
# the first N layers' saved tensors go to the host in forward and come back in backward, copied
# on side streams beside the next layers' compute. Megatron-Core refuses it with pipeline
# parallelism and with any recompute (megatron/core/transformer/transformer_config.py,
# __post_init__: "no support for Pipeline parallelism with CPU offloading", "CPU offloading does
# not work when activation recomputation is enabled"), so every layer keeps None's set and one
# stage holds them all. While a layer's copy runs its tensors are still on the device: one
# offloaded layer's set stays resident (an assumption: TE frees a layer's copies once the next
# layer's forward has begun).
OFFLOADED_LAYERS_RESIDENT = 1


def offloaded_layers_off_device(offload_layers: int | None) -> float:
    """Layers whose saved set is off the device at the peak under Megatron's CPU offloading."""
    if not offload_layers:
        return 0.0
    return float(max(offload_layers - OFFLOADED_LAYERS_RESIDENT, 0))


def layer_offload(
    offload_layers: int | None,
    stored_per_layer: ArrayLike,
    host_link: float,
    layer_seconds: ArrayLike,
) -> tuple[F64, F64]:
    """(host bytes per accelerator, exposed copy seconds per micro-batch) of Megatron's CPU
    offloading of ``offload_layers`` layers, each ``stored_per_layer`` bytes (None's set) per
    micro-batch: one micro-batch in flight (a single stage), each layer's copies beyond its own
    forward and backward (:func:`exposed_offload_seconds`)."""
    n = float(offload_layers or 0)
    stored = _f(stored_per_layer)
    return _f(n * stored), _f(n * exposed_offload_seconds(stored, host_link, layer_seconds))
