"""What a JAX job's environment changes in its plan: the memory XLA may allocate on a GPU, and
whether XLA's rematerialisation pass runs.

JAX on a GPU hands XLA's allocator a pool of the device's memory and XLA plans every buffer of
the step inside it; the CUDA context and cuBLAS' workspaces live outside (JAX's "GPU memory
allocation" page, docs.jax.dev): the pool is 75 % of the total by default, and
``XLA_CLIENT_MEM_FRACTION`` (``XLA_PYTHON_CLIENT_MEM_FRACTION`` before) states another fraction.
Since its "0.75+" policy JAX lets the default pool grow to the whole device when neither
fraction is set, while a stated fraction is the pool, so:

* **a stated fraction** f: the layout must fit f x the device's memory, with nothing reserved
  beside it (the runtime's share is the rest). MaxText's GPU scripts state 0.85-0.9;
* **none stated**: the whole device less the runtime's reserve, as for PyTorch, and the plan
  says the pool is JAX's default (75 % on JAX releases before the 0.75+ policy);
* ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` allocates as the step needs, up to the stated fraction
  (nothing else changes in the plan); ``XLA_PYTHON_CLIENT_ALLOCATOR=platform`` allocates and
  frees every buffer through CUDA, no pool: planned against the device, its slowness not
  modelled and said so;
* ``--xla_disable_hlo_passes=rematerialization`` in ``XLA_FLAGS`` (MaxText's A3 scripts) turns
  XLA's rematerialisation off: a policy that overflows no longer fits by XLA recomputing part
  of it (engine.recompute.compiler_remat_share).

Applies to a framework whose step XLA compiles (XLA_FRAMEWORKS: MaxText) on a GPU. Any other
``XLA_*`` variable, and these on a stack that does not run XLA on a GPU, is listed as having no
effect on the plan. A fraction that is not a number in (0, 1] is refused by name. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ringmaster.engine.layout_hardware import LayoutHardware
from ringmaster.engine.units import GIB

MEMORY_FRACTION_VARIABLES = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
ALLOCATOR = "XLA_PYTHON_CLIENT_ALLOCATOR"
FLAGS = "XLA_FLAGS"
REMAT_OFF = "--xla_disable_hlo_passes=rematerialization"
DEFAULT_POOL_FRACTION = 0.75  # JAX's preallocation, grown past since its 0.75+ policy
XLA_FRAMEWORKS = ("MaxText",)  # the frameworks whose step XLA compiles (engine.frameworks)


@dataclass(frozen=True)
class JaxSettings:
    memory_fraction: float | None  # the stated pool, of the device's memory
    preallocate: bool
    platform_allocator: bool
    remat_disabled: bool
    other: tuple[str, ...]  # XLA_* variables the plan does not read


def _values(env: Sequence[tuple[str, str]] | Mapping[str, str]) -> dict[str, str]:
    return dict(env.items() if isinstance(env, Mapping) else env)


def _fraction(name: str, value: str) -> float:
    try:
        fraction = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: JAX takes a fraction of the GPU's memory") from None
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"{name}={value!r}: JAX takes a fraction in (0, 1] of the GPU's memory")
    return fraction


def jax_settings(env: Sequence[tuple[str, str]] | Mapping[str, str]) -> JaxSettings:
    """The JAX / XLA settings of a pod's environment (its ``XLA_*`` variables); a memory
    fraction that is not one is refused (ValueError naming the variable)."""
    values = _values(env)
    fraction = None
    for name in MEMORY_FRACTION_VARIABLES:  # the new name wins where both are set
        if name in values:
            fraction = _fraction(name, values[name])
            break
    flags = values.get(FLAGS, "")
    read = {*MEMORY_FRACTION_VARIABLES, PREALLOCATE, ALLOCATOR, FLAGS}
    return JaxSettings(
        memory_fraction=fraction,
        preallocate=values.get(PREALLOCATE, "true").strip().lower() not in ("false", "0"),
        platform_allocator=values.get(ALLOCATOR, "").strip().lower() == "platform",
        remat_disabled=REMAT_OFF in flags.split(),
        other=tuple(sorted(n for n in values if n.startswith("XLA_") and n not in read)),
    )


def jax_hardware(
    hw: LayoutHardware, env: Sequence[tuple[str, str]] | Mapping[str, str]
) -> tuple[LayoutHardware, list[str]]:
    """The layout hardware as JAX runs the job (the module's docstring), and the notes that say
    so; unchanged, with notes only, for a stack that does not run XLA on a GPU."""
    values = _values(env)
    if not values:
        return hw, []
    settings = jax_settings(values)
    names = ", ".join(sorted(values))
    if not (hw.framework.name in XLA_FRAMEWORKS and hw.kind == "gpu"):
        where = "a TPU" if hw.kind == "tpu" else f"framework {hw.framework.name}"
        return hw, [f"{names}: no effect on the plan on {where} (JAX's GPU settings)"]
    notes = []
    if settings.memory_fraction is not None and not settings.platform_allocator:
        pool = settings.memory_fraction * hw.memory_bytes
        outside = hw.memory_bytes - pool
        hw = replace(hw, memory_bytes=pool, runtime_reserve_bytes=0.0)
        notes.append(
            f"JAX's memory pool: {settings.memory_fraction:g} of the GPU, {pool / GIB:.1f} GiB "
            f"that XLA plans every buffer in ({outside / GIB:.1f} GiB left to the CUDA context "
            "and cuBLAS)"
        )
    elif settings.platform_allocator:
        notes.append(
            f"{ALLOCATOR}=platform: every buffer allocated and freed through CUDA, no pool; "
            "planned against the whole GPU, the allocations' cost not modelled"
        )
    else:
        notes.append(
            "JAX's default memory pool: planned against the whole GPU less the runtime's "
            f"reserve, as JAX's 0.75+ policy grows it; JAX releases before it stop at "
            f"{DEFAULT_POOL_FRACTION:.0%} (state XLA_CLIENT_MEM_FRACTION to plan a fixed pool)"
        )
    if not settings.preallocate:
        notes.append(f"{PREALLOCATE}=false: the pool is allocated as the step needs it")
    if settings.remat_disabled:
        hw = replace(hw, framework=replace(hw.framework, compiler_remat=False))
        notes.append(
            f"XLA_FLAGS {REMAT_OFF}: XLA does not rematerialise, so the recompute policy must "
            "fit as it stands"
        )
    if settings.other:
        notes.append(f"{', '.join(settings.other)}: not read by the plan (no modelled effect)")
    if set(values.get(FLAGS, "").split()) - {REMAT_OFF}:
        notes.append(f"{FLAGS}: its other flags are not read by the plan (no modelled effect)")
    return hw, notes


def ignored_settings(
    env: Sequence[tuple[str, str]] | Mapping[str, str], framework_name: str, kind: str
) -> tuple[str, ...]:
    """What in a JAX job's ``XLA_*`` variables may change its step and the plan does not read:
    every other variable, XLA_FLAGS' other flags (by name), the platform allocator's cost; none
    on a stack that does not run XLA on a GPU (the plan's notes say so)."""
    values = _values(env)
    if not values or framework_name not in XLA_FRAMEWORKS or kind != "gpu":
        return ()
    settings = jax_settings(values)
    flags = sorted(
        {f.split("=")[0] for f in values.get(FLAGS, "").split()} - {REMAT_OFF.split("=")[0]}
    )
    out = [*settings.other, *(f"{FLAGS} {f}" for f in flags)]
    if settings.platform_allocator:
        out.append(f"{ALLOCATOR}=platform (its allocations' cost)")
    return tuple(out)
