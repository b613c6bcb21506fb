"""What the run worker is sent (a spec per kernel signature, a request per config) and keeps.

Per kernel signature the parent sends a :class:`SessionSpec` and the worker keeps a
:class:`RunSession` (inputs, reference, loaded libraries); per config it sends a
:class:`RunRequest`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import torch

from tileauto.artifact import KernelArtifact, ParamSpec
from tileauto.options import ProfileArgs
from tileauto.run.timing import Timer


@dataclass
class SessionSpec:
    """Everything the run worker needs once per kernel signature (picklable).

    ``profile`` is the tuning's :class:`~tileauto.options.ProfileArgs` as the worker sees it
    (``ProfileArgs.for_worker``): a new profile option reaches the worker without a copy here.
    The other fields are what the parent resolved for this signature.
    """

    params: tuple[ParamSpec, ...]
    out_pos: tuple[int, ...]
    device: str
    profile: ProfileArgs = field(default_factory=ProfileArgs)
    captured: list[torch.Tensor] | None = None
    inplace_args: tuple[int, ...] | None = None  # input positions, checked by the runner
    flush: bool | None = None  # resolved: L2 flush on CUDA unless turned off
    timer: Timer | None = None
    threads: int = 1
    reference: list[torch.Tensor] | None = None
    reference_inplace: tuple[int, ...] | None = None


@dataclass(frozen=True)
class RunRequest:
    """Run one compiled config: validate it, then time it."""

    artifact: KernelArtifact
    config: dict[str, Any]
    is_reference: bool = False
    time_it: bool = True
    # a re-timing: the calls of the config's first timing (RunOutcome.iters), which another
    # worker (a replacement, another Ray actor) does not know; None: its own, else measured
    iters: tuple[int, int] | None = None


def config_key(config: dict[str, Any]) -> str:
    """A config as a dict key (its values may be of any kind)."""
    return json.dumps(config, sort_keys=True, default=repr)


@dataclass
class RunSession:
    """One kernel signature's inputs, reference and loaded libraries."""

    spec: SessionSpec
    inputs: list[torch.Tensor]
    in_pos: tuple[int, ...]
    expected: Any = None  # ref_prog's outputs (reference mode)
    ref_checker: bool = False  # ref_prog is called with inputs and results, returns bool
    reference: list[torch.Tensor] | None = None
    inplace: tuple[int, ...] | None = None
    timer: Timer | None = None
    ref_error: str | None = None
    modules: dict[str, Any] = field(default_factory=dict)
    iters: dict[str, tuple[int, int]] = field(default_factory=dict)  # per config: warm-up, rep
