"""What a target resolves to on this machine, remembered on disk so a warm start needs no compiler.

Resolving ``target="auto"`` or ``"llvm"`` asks LLVM about this CPU (``Target.from_device``),
and the device fingerprint in every cache key asks LLVM too: both need TVM's compiler, which
takes seconds to import. A process that only loads tuned kernels should not pay for it. So
whenever the compiler resolves a target, the answer is written to a small JSON memo,
``<cache>/targets/<digest>.json``, keyed by everything the answer depends on: the target and
target_host as given, ``TILEAUTO_DEFAULT_TARGET``, this host's CPU (model and flags from
``/proc/cpuinfo``, hashed), the GPU torch sees (only for targets that may be CUDA), and the
versions and location of TVM and tileauto. A later process with the same inputs reads the
answer back; any change is another entry, and a miss resolves with the compiler (slower,
never wrong). The memo also remembers whether a stored library runs on this machine
(``load_from_disk``'s check). Memo files follow the cache's rules: a private folder, files
owned by this user and written whole (rename into place); one that is not is ignored.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import platform
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.jit.runtime import compiler_loaded
from tileauto.settings import Settings

log = get_logger("jit")

MEMO_FORMAT = 1
MEMO_DIR = "targets"
# /proc/cpuinfo lines that identify the CPU model and its features (not its clock or core ids)
_CPU_FIELDS = (
    "vendor_id",
    "cpu family",
    "model",
    "model name",
    "stepping",
    "flags",
    "features",
    "cpu implementer",
    "cpu architecture",
    "cpu variant",
    "cpu part",
    "cpu revision",
    "isa",
    "uarch",
    "mmu",
)
_CPU_KINDS = ("llvm", "c")


@dataclass(frozen=True)
class ResolvedTarget:
    """A target as the compiler resolves it here: what every cache key records.

    Attributes:
        json: the target as stable JSON text (``jit.target.target_json``).
        device_type: ``"cpu"`` or ``"cuda"``.
        device: the device fingerprint (``jit.target.device_fingerprint``).
    """

    json: str
    device_type: str
    device: dict[str, Any]


class _NotMemoizable(Exception):
    """A target given as an object (a ``tvm.target.Target``): the compiler is loaded anyway."""


# -- identities -----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def host_identity() -> str | None:
    """A hash of this CPU's model and features, or None when it cannot be read (no memo)."""
    lines: list[str] = []
    try:
        with open("/proc/cpuinfo", errors="replace") as f:
            for line in f:  # the first processor's block (a big machine lists hundreds)
                if not line.strip():
                    if lines:
                        break
                    continue
                name, sep, value = line.partition(":")
                if sep and name.strip().lower() in _CPU_FIELDS:
                    lines.append(f"{name.strip().lower()}={value.strip()}")
    except OSError:
        return None
    if not lines:
        return None
    lines += [f"machine={platform.machine()}", f"system={platform.system()}"]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]


def _gpu_identity() -> dict[str, Any]:
    """The GPU torch sees (CUDA targets depend on it); imports torch."""
    try:
        import torch

        if not torch.cuda.is_available():
            return {"cuda": False}
        props = torch.cuda.get_device_properties(0)
        return {
            "cuda": True,
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "count": torch.cuda.device_count(),
            "torch_cuda": torch.version.cuda,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
    except Exception as exc:  # noqa: BLE001 - a broken driver: no GPU, as cuda_usable says
        return {"cuda": False, "error": type(exc).__name__}


@functools.lru_cache(maxsize=1)
def _software() -> dict[str, Any]:
    from tileauto.cache.key import tvm_version

    spec = importlib.util.find_spec("tvm")
    return {
        "memo": MEMO_FORMAT,
        "tvm": tvm_version(),
        "tvm_at": str(spec.origin) if spec is not None else None,
        "tvm_library_path": os.environ.get("TVM_LIBRARY_PATH"),
        "tileauto": str(getattr(sys.modules.get("tileauto"), "__version__", "unknown")),
    }


def _spec(value: Any) -> Any:
    """A target argument as JSON (a string as given, a dict canonical); objects raise."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.loads(json.dumps(value, sort_keys=True))
        except (TypeError, ValueError):
            raise _NotMemoizable from None
    raise _NotMemoizable


def _kind_of(spec: Any, default_target: str) -> str | None:
    """The target kind a spec names, when it is plain (None for ``auto`` on a GPU or a tag)."""
    if spec is None or (isinstance(spec, str) and spec.strip() == "auto"):
        return None if default_target.strip() == "auto" else _kind_of(default_target, "auto")
    if isinstance(spec, str):
        text = spec.strip()
        if text in ("llvm", "cpu", "c", "cuda"):
            return "llvm" if text == "cpu" else text
        try:
            spec = json.loads(text)
        except ValueError:
            return None  # a tag such as "nvidia/nvidia-h100"
    return str(spec.get("kind")) if isinstance(spec, dict) else None


def _cpu_only(*specs: Any, default_target: str) -> bool:
    return all(_kind_of(s, default_target) in _CPU_KINDS for s in specs if s is not None)


def _machine(cpu_only: bool) -> dict[str, Any] | None:
    host = host_identity()
    if host is None:
        return None
    return {"host": host, "gpu": None if cpu_only else _gpu_identity()}


# -- the memo on disk -----------------------------------------------------------------------------
def _memo_dir(settings: Settings) -> Path | None:
    if not (settings.tuning_cache_enabled or settings.kernel_cache_enabled):
        return None  # the caches are off: nothing is written under the cache folder
    return settings.cache_dir / MEMO_DIR


def _memo_path(directory: Path, payload: dict[str, Any]) -> Path:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return directory / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.json"


def _read(settings: Settings, payload: dict[str, Any]) -> Any:
    """The memo's value for ``payload``, or None (missing, foreign, unsafe or unreadable)."""
    from tileauto.cache.folders import read_own_json

    directory = _memo_dir(settings)
    if directory is None:
        return None
    data = read_own_json(_memo_path(directory, payload), check_folder=True)
    if not isinstance(data, dict) or data.get("payload") != payload:
        return None
    return data.get("value")


def _write(settings: Settings, payload: dict[str, Any], value: Any) -> None:
    """Store ``value`` for ``payload``; a failure only costs the next process a compiler import."""
    from tileauto.cache.folders import make_private_dir

    directory = _memo_dir(settings)
    if directory is None:
        return
    path = _memo_path(directory, payload)
    tmp = directory / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        make_private_dir(directory)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"payload": payload, "value": value}, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        log.debug("target memo %s not written: %s", path, exc)
        try:
            tmp.unlink()
        except OSError:
            pass


def _remembered(settings: Settings, payload: dict[str, Any] | None, compute: Any) -> Any:
    """The memo's value, or ``compute()`` stored for next time (always when TVM is loaded)."""
    stored = _read(settings, payload) if payload is not None else None
    if stored is not None and not compiler_loaded():
        return stored
    value = compute()  # imports TVM's compiler
    if payload is not None and value != stored:
        _write(settings, payload, value)
    return value


# -- what the warm path asks --------------------------------------------------------------------
def resolve(
    target: Any, target_host: Any = None, settings: Settings | None = None
) -> ResolvedTarget:
    """Resolve a target as :func:`tileauto.jit.target.resolve_target` does, from the memo if it can.

    Raises:
        ValueError: the target cannot be understood (from the compiler, on a memo miss).
    """
    settings = settings if settings is not None else Settings.from_env()
    payload = _target_payload("target", target, target_host, settings)

    def compute() -> dict[str, Any]:
        from tileauto.jit import target as compiler_target

        resolved = compiler_target.resolve_target(target, target_host)
        device_type = compiler_target.device_type_of(resolved)
        value = {
            "json": compiler_target.target_json(resolved),
            "device_type": device_type,
            "device": compiler_target.device_fingerprint(device_type),
        }
        _remember_host_target(settings, value)
        return value

    value = _remembered(settings, payload, compute)
    try:
        return ResolvedTarget(str(value["json"]), str(value["device_type"]), dict(value["device"]))
    except (KeyError, TypeError, ValueError):  # a memo of another shape: resolve again
        return ResolvedTarget(**_as_resolved(compute()))


def _as_resolved(value: dict[str, Any]) -> dict[str, Any]:
    return {"json": value["json"], "device_type": value["device_type"], "device": value["device"]}


def device_fingerprint(device_type: str, settings: Settings | None = None) -> dict[str, Any]:
    """:func:`tileauto.jit.target.device_fingerprint`, from the memo if it can."""
    settings = settings if settings is not None else Settings.from_env()
    machine = _machine(cpu_only=device_type != "cuda")
    payload = (
        None
        if machine is None
        else {"what": "device", "device_type": device_type, **machine, **_software()}
    )

    def compute() -> dict[str, Any]:
        from tileauto.jit import target as compiler_target

        return compiler_target.device_fingerprint(device_type)

    return dict(_remembered(settings, payload, compute))


def cannot_run_here(
    artifact: Any, compile_args: Any, settings: Settings | None = None
) -> str | None:
    """Why a stored library cannot run on this machine (None: it can), from the memo if it can.

    See :func:`tileauto.jit.target.cannot_run_here`, which answers on a miss.
    """
    settings = settings if settings is not None else Settings.from_env()
    explicit = _explicit(compile_args)
    payload = None
    try:
        wanted = [_spec(compile_args.target), _spec(compile_args.target_host)] if explicit else None
        specs = [json.loads(artifact.target)] + (wanted or [])
        cpu_only = artifact.device_type != "cuda" and _cpu_only(
            *specs, default_target=settings.default_target
        )
        machine = _machine(cpu_only)
        if machine is not None:
            payload = {
                "what": "runs_here",
                "stored": artifact.target,
                "device_type": artifact.device_type,
                "wanted": wanted,
                **machine,
                **_software(),
            }
    except (_NotMemoizable, ValueError, TypeError):
        payload = None

    def compute() -> dict[str, Any]:
        from tileauto.jit import target as compiler_target

        wanted_target = (
            compiler_target.resolve_target(compile_args.target, compile_args.target_host)
            if explicit
            else None
        )
        reason = compiler_target.cannot_run_here(
            artifact.target, artifact.device_type, wanted_target
        )
        return {"reason": reason}

    reason = _remembered(settings, payload, compute).get("reason")
    return None if reason is None else str(reason)


def _explicit(compile_args: Any) -> bool:
    """Whether ``compile_args`` asks for a target (``"auto"`` and None do not)."""
    target = getattr(compile_args, "target", None)
    return target is not None and not (isinstance(target, str) and target.strip() == "auto")


def _target_payload(
    what: str, target: Any, target_host: Any, settings: Settings
) -> dict[str, Any] | None:
    try:
        specs = [_spec(target), _spec(target_host)]
    except _NotMemoizable:
        return None
    machine = _machine(_cpu_only(*specs, default_target=settings.default_target))
    if machine is None:
        return None
    return {
        "what": what,
        "target": specs[0],
        "target_host": specs[1],
        "default_target": settings.default_target,
        **machine,
        **_software(),
    }


def _remember_host_target(settings: Settings, value: dict[str, Any]) -> None:
    """A target the compiler detected for this CPU runs here: remember that for load_from_disk."""
    if value["device_type"] != "cpu":
        return
    from tileauto.jit import target as compiler_target

    if value["json"] != compiler_target.target_json(compiler_target.host_cpu_target()):
        return
    machine = _machine(cpu_only=True)
    if machine is None:
        return
    payload = {
        "what": "runs_here",
        "stored": value["json"],
        "device_type": "cpu",
        "wanted": None,
        **machine,
        **_software(),
    }
    if _read(settings, payload) is None:
        _write(settings, payload, {"reason": None})
    device = {"what": "device", "device_type": "cpu", **machine, **_software()}
    if _read(settings, device) != value["device"]:
        _write(settings, device, value["device"])


__all__ = ["ResolvedTarget", "cannot_run_here", "device_fingerprint", "host_identity", "resolve"]
