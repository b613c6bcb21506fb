"""Turn the user's ``target`` argument into a TVM Target, and describe the device it runs on."""

from __future__ import annotations

import functools
import json
from typing import Any

import tvm
from tvm.target import Target

from tileauto.settings import Settings

TargetLike = str | dict | Target | None


@functools.lru_cache(maxsize=1)
def host_cpu_target() -> Target:
    """LLVM for this CPU with its real features (plain ``"llvm"`` means generic SSE only)."""
    return Target.from_device("cpu")


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
        if default != "auto":
            return resolve_target(default, target_host)
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
    if target_host is not None:
        host = resolve_target(target_host)
        resolved = Target(resolved, host=host)
    elif resolved.kind.name == "cuda" and resolved.host is None:
        resolved = Target(resolved, host=host_cpu_target())
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
