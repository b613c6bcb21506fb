"""Turn the user's ``target`` argument into a TVM Target, and describe the device it runs on.

This module imports TVM's compiler. The warm path asks :mod:`tileauto.jit.target_memo`
instead, which remembers these answers on disk and calls here only on a miss.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, TypeAlias

import tvm
from tvm.target import Target

from tileauto.errors import SettingsError
from tileauto.settings import Settings

TargetLike: TypeAlias = str | dict | Target | None

# LLVM CPU features that are instructions (a kernel using one dies with SIGILL without it);
# the others (fast-*, slow-*, prefer-*...) only steer code generation.
_ISA_FEATURE = re.compile(
    r"^(sse|ssse|avx|fma|f16c|amx|bmi|lzcnt|popcnt|movbe|aes|pclmul|sha|vaes|vpclmul|gfni|adx|"
    r"cx16|xsave|sve|sme|neon|fp-armv8|dotprod|i8mm|bf16|fullfp16|fp16|rvv|zv|v$)"
)


@functools.lru_cache(maxsize=1)
def host_cpu_target() -> Target:
    """LLVM for this CPU with its real features (plain ``"llvm"`` means generic SSE only).

    TVM names this CPU's model (``mcpu``), which implies the model's features; an
    instruction set this CPU reports off although its model has it (a VM that masks
    AVX-512) is turned off with ``mattr``, so that no kernel built here needs it. Elsewhere
    the target is TVM's as is.
    """
    detected = Target.from_device("cpu")
    masked = _masked_features(detected)
    if not masked:
        return detected
    spec = json.loads(str(detected))
    spec["mattr"] = [*spec.get("mattr", []), *(f"-{name}" for name in masked)]
    return Target(spec)


@functools.lru_cache(maxsize=1)
def host_cpu_features() -> dict[str, bool]:
    """This CPU's features as LLVM reads them (CPUID and what the OS enabled), by LLVM name:
    True on, False off; a feature LLVM does not check here is absent. Empty when this TVM
    does not offer LLVM's reading."""
    try:
        import tvm_ffi

        read = tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures", allow_missing=True)
        return {} if read is None else {str(k): bool(v) for k, v in read().items()}
    except Exception:  # noqa: BLE001 - no reading: the model's features stand for this CPU's
        return {}


def _masked_features(named: Target) -> list[str]:
    """The instruction sets ``named`` (this CPU's model) implies that this CPU reports off."""
    from tvm.target import codegen

    off = {name for name, on in host_cpu_features().items() if not on}
    try:
        implied = set(codegen.llvm_get_cpu_features(named))
    except Exception:  # noqa: BLE001 - an unknown model: nothing to turn off
        return []
    return sorted(name for name in implied & off if _ISA_FEATURE.match(name))


def cpu_features_here() -> set[str]:
    """The features of this CPU: its model's, less those it reports off, plus those it
    reports on (a feature LLVM cannot read here is taken from the model)."""
    from tvm.target import codegen

    real = host_cpu_features()
    named = set(codegen.llvm_get_cpu_features(host_cpu_target()))
    return {f for f in named if real.get(f, True)} | {f for f, on in real.items() if on}


def cuda_usable() -> bool:
    """Whether torch sees a GPU and this TVM can run CUDA code."""
    try:
        import torch

        return bool(torch.cuda.is_available()) and bool(tvm.runtime.enabled("cuda"))
    except Exception:  # pragma: no cover - depends on the machine's driver
        return False


def _cuda_target() -> Target:
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            arch = f"sm_{major}{minor}" + ("a" if major == 9 else "")
            return Target({"kind": "cuda", "arch": arch}, host=host_cpu_target())
    except Exception:  # pragma: no cover - depends on the machine's driver
        pass
    return Target({"kind": "cuda", "arch": "sm_80"}, host=host_cpu_target())


def resolve_target(target: TargetLike, target_host: TargetLike = None) -> Target:
    """Resolve ``"auto"``, ``"llvm"``, ``"cuda"``, a dict, JSON text or a Target.

    ``"auto"`` honours ``TILEAUTO_DEFAULT_TARGET``, then picks CUDA when torch sees a GPU and
    TVM was built with CUDA, else the host CPU. ``"llvm"`` also means the host CPU with its
    features; pass a dict such as ``{"kind": "llvm"}`` for a generic build.

    Raises:
        ValueError: the target cannot be understood; the message names ``target``.
    """
    if target is None or (isinstance(target, str) and target.strip() == "auto"):
        default = Settings.from_env().default_target
        if default.lower() != "auto":
            try:
                resolved_default = resolve_target(default)
            except ValueError as exc:  # the variable's fault, not the call's target="auto"
                raise SettingsError(
                    f"TILEAUTO_DEFAULT_TARGET={default!r} (the target of target='auto'): "
                    f"{str(exc).replace(f'target={default!r} ', '', 1)}"
                ) from None
            return _with_host(resolved_default, target_host)
        resolved = _cuda_target() if cuda_usable() else host_cpu_target()
    elif isinstance(target, Target):
        resolved = target
    elif isinstance(target, str) and target.strip() in ("llvm", "cpu"):
        resolved = host_cpu_target()
    elif isinstance(target, str) and target.strip() == "cuda":
        resolved = _cuda_target()
    elif isinstance(target, (str, dict)):
        try:
            resolved = Target(target)
        except Exception as exc:
            raise ValueError(
                f"target={target!r} is not a TVM target: expected 'auto', 'llvm', 'cuda', a tag "
                f"such as 'nvidia/nvidia-h100', a dict like {{'kind': 'llvm', 'mcpu': 'znver3'}} "
                f"or a tvm.target.Target ({exc})"
            ) from None
    else:
        raise ValueError(
            f"target must be 'auto', a str, a dict or a tvm.target.Target, got {type(target).__name__}"
        )
    return _with_host(resolved, target_host)


def _with_host(resolved: Target, target_host: TargetLike) -> Target:
    """``resolved`` with ``target_host`` as its host (a CUDA target gets this CPU by default).

    Raises:
        ValueError: ``target_host`` cannot be understood; the message names it.
    """
    if target_host is not None:
        if isinstance(target_host, str) and target_host.strip() == "auto":
            host = host_cpu_target()  # the host of a target is a CPU: "auto" is this one
        else:
            try:
                host = resolve_target(target_host)
            except ValueError as exc:
                raise ValueError(re.sub(r"^target\b", "target_host", str(exc), count=1)) from None
        return Target(resolved, host=host)
    if resolved.kind.name == "cuda" and resolved.host is None:
        return Target(resolved, host=host_cpu_target())
    return resolved


def device_type_of(target: Target) -> str:
    """``"cuda"`` for GPU targets, ``"cpu"`` for LLVM and C."""
    return "cuda" if target.kind.name in ("cuda", "nvptx") else "cpu"


def target_json(target: Target) -> str:
    """A stable JSON text for a target (round-trips through ``Target(text)``)."""
    return json.dumps(json.loads(str(target)), sort_keys=True)


@functools.lru_cache(maxsize=4)
def device_fingerprint(device_type: str) -> dict[str, Any]:
    """What identifies the hardware a kernel was tuned on (part of every cache key)."""
    if device_type == "cuda":
        import torch

        if not torch.cuda.is_available():  # compiling for CUDA on a machine without a GPU
            return {"kind": "cuda", "name": "no-gpu", "cuda": torch.version.cuda}
        props = torch.cuda.get_device_properties(0)
        return {
            "kind": "cuda",
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "cuda": torch.version.cuda,
        }
    from tvm.target import codegen

    host = host_cpu_target()
    return {
        "kind": "cpu",
        "mcpu": str(host.attrs.get("mcpu", "")),
        "triple": str(codegen.llvm_get_system_triple()),
        "vendor": str(codegen.llvm_get_system_x86_vendor())
        if hasattr(codegen, "llvm_get_system_x86_vendor")
        else "",
    }


def cannot_run_here(stored_json: str, device_type: str, wanted: Target | None) -> str | None:
    """Why a library built for ``stored_json`` cannot run on this machine, or None when it can.

    Args:
        stored_json: the target the library was built for (JSON text).
        device_type: ``"cpu"`` or ``"cuda"``.
        wanted: the target the caller asks for (``load_from_disk(compile_args=...)``), if any:
            another kind than the stored one is a reason.

    A CPU kernel, and the host code of a CUDA kernel, needs this CPU's architecture and every
    instruction set its target implies, judged by this CPU's own features
    (:func:`cpu_features_here`), not those of its model's name.
    """
    stored = Target(stored_json)
    if wanted is not None and wanted.kind.name != stored.kind.name:
        return f"compile_args asks for a {wanted.kind.name} target; it was built for {stored.kind.name}"
    if device_type == "cuda":
        if not cuda_usable():
            return "it is a CUDA kernel and no usable CUDA GPU is here"
        here = str(resolve_target("cuda").attrs.get("arch", ""))
        built = str(stored.attrs.get("arch", ""))
        if built and built != here:
            return f"built for {built}, this GPU is {here}"
        host = stored.host  # the launching code runs on this CPU: it is checked as a CPU kernel
        lacks = _cpu_cannot_run(host) if host is not None else None
        return None if lacks is None else f"its host code: {lacks}"
    return _cpu_cannot_run(stored)


def _cpu_cannot_run(stored: Target) -> str | None:
    """Why code built for the CPU target ``stored`` cannot run on this CPU, or None."""
    from tvm.target import codegen

    triple = str(stored.attrs.get("mtriple", "") or "")
    arch_here = str(codegen.llvm_get_system_triple()).split("-")[0]
    if triple and triple.split("-")[0] != arch_here:
        return f"built for {triple.split('-')[0]}, this CPU is {arch_here}"
    if stored.kind.name != "llvm":
        return None
    try:
        needed = set(codegen.llvm_get_cpu_features(stored))
        have = cpu_features_here()
    except Exception:  # noqa: BLE001 - unknown features: let loading the library decide
        return None
    missing = sorted(f for f in needed - have if _ISA_FEATURE.match(f))
    if missing:
        return f"it uses CPU instructions this CPU lacks ({', '.join(missing[:6])})"
    return None
