"""Every ``NCCL_*`` variable of a pod's environment, sorted into what the engine does with it.

A TrainingJob's pod template may set any NCCL variable; the engine models a few of them, and a
setting it silently dropped would leave a plan that disagrees with the run without a word
(``NCCL_NVLS_ENABLE=0`` costs 30 % on an H100 host). So every variable lands in exactly one of:

* **modelled**: it changes the prediction as it changes NCCL (:data:`MODELLED`): ``NCCL_ALGO``
  and ``NCCL_PROTO`` restrict the algorithms and protocols the tuner model picks from,
  ``NCCL_NVLS_ENABLE=0`` removes NVLS and NVLSTree. A value NCCL would reject is refused by name
  (a ``ValueError`` naming the variable), as NCCL refuses it;
* **no effect on performance** (:data:`NO_EFFECT`, :data:`NO_EFFECT_PREFIXES`): logging,
  dumps, which interface or device to use by name, timeouts and retries, and the transport
  plugin's own configuration (the machine type's transport is what the engine models, its
  plugin settings are how that transport is reached). Listed in the plan, nothing more;
* **ignored**: every other variable. It may change performance (``NCCL_MIN_NCHANNELS``,
  ``NCCL_BUFFSIZE``, ``NCCL_CROSS_NIC``...) and the engine does not model it: the plan flags it by
  name (``ringmaster plan`` prints it, the operator shows it as a warning on the job).

Pure: no I/O. The names follow NCCL's environment-variable documentation
(docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, 2.2x).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ringmaster.engine import collectives as C

# What each modelled variable does in the engine.
MODELLED: dict[str, str] = {
    "NCCL_ALGO": "restricts the algorithms the tuner model picks (Ring, Tree, NVLS, NVLSTree)",
    "NCCL_PROTO": "restricts the protocols the tuner model picks (LL, LL128, Simple)",
    "NCCL_NVLS_ENABLE": "0 removes NVLS and NVLSTree (NVLink SHARP) from the tuner model",
}

# Variables that do not change a collective's performance: debugging and logging, dumps, naming
# the interfaces / devices / ports NCCL should use (the catalog's NICs are the ones in use),
# timeouts and retries, the communicator id.
NO_EFFECT: frozenset[str] = frozenset(
    {
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_DEBUG_FILE",
        "NCCL_DEBUG_TIMESTAMP_FORMAT",
        "NCCL_DEBUG_TIMESTAMP_LEVELS",
        "NCCL_WARN_ENABLE_DEBUG_INFO",
        "NCCL_SOCKET_IFNAME",
        "NCCL_SOCKET_FAMILY",
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "NCCL_IB_ADDR_FAMILY",
        "NCCL_IB_ADDR_RANGE",
        "NCCL_IB_ROCE_VERSION_NUM",
        "NCCL_IB_TIMEOUT",
        "NCCL_IB_RETRY_CNT",
        "NCCL_COMM_ID",
        "NCCL_HOSTID",
        "NCCL_TOPO_DUMP_FILE",
        "NCCL_GRAPH_DUMP_FILE",
        "NCCL_TOPO_FILE",
        "NCCL_CONF_FILE",
        "NCCL_SET_THREAD_NAME",
        "NCCL_RAS_ENABLE",
        "NCCL_RAS_ADDR",
        "NCCL_RAS_TIMEOUT_FACTOR",
        "NCCL_ABORT_ON_ERROR",
        "NCCL_IGNORE_DISABLED_P2P",
        "NCCL_NET",
        "NCCL_NET_PLUGIN",
    }
)
# Prefixes of a transport plugin's own settings: GCP's GPUDirect-TCPX / TCPXO (FasTrak), AWS's
# aws-ofi-nccl. The engine models the machine type's transport, which these configure.
NO_EFFECT_PREFIXES: tuple[str, ...] = (
    "NCCL_GPUDIRECTTCPX_",
    "NCCL_FASTRAK_",
    "NCCL_OFI_",
    "NCCL_SHIMNET_",
)


@dataclass(frozen=True)
class NcclSettings:
    """A pod environment's NCCL variables, each in one of three groups (names sorted)."""

    modelled: tuple[tuple[str, str], ...] = ()  # (name, value)
    no_effect: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()

    def notes(self) -> list[str]:
        """A line for the modelled and one for the no-effect variables, for a plan's notes (the
        ignored ones are a warning: :func:`ignored_message`)."""
        out = []
        if self.modelled:
            pairs = ", ".join(f"{k}={v}" for k, v in self.modelled)
            out.append(f"NCCL settings modelled: {pairs}")
        if self.no_effect:
            out.append(
                "NCCL settings not modelled, no effect on performance: " + ", ".join(self.no_effect)
            )
        return out


def ignored_message(names: Iterable[str]) -> str:
    return (
        "ignored by the engine: "
        + ", ".join(names)
        + " (NCCL settings that may change performance and that the engine does not model: "
        "the prediction is NCCL's default for them)"
    )


def is_no_effect(name: str) -> bool:
    return name in NO_EFFECT or name.startswith(NO_EFFECT_PREFIXES)


def classify(env: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> NcclSettings:
    """Sort ``env``'s ``NCCL_*`` variables (other variables are not NCCL's and are left out).
    Raises ValueError naming the variable when a modelled one has a value NCCL rejects."""
    pairs = dict(env.items() if isinstance(env, Mapping) else (env or ()))
    nccl = {k: v for k, v in pairs.items() if k.startswith("NCCL_")}
    modelled = {k: v for k, v in nccl.items() if k in MODELLED}
    for kind in C.KINDS:
        C.parse_nccl_env(modelled, kind)  # refuses a bad NCCL_ALGO / NCCL_PROTO / NVLS value
    rest = sorted(k for k in nccl if k not in MODELLED)
    return NcclSettings(
        modelled=tuple(sorted(modelled.items())),
        no_effect=tuple(k for k in rest if is_no_effect(k)),
        ignored=tuple(k for k in rest if not is_no_effect(k)),
    )
