"""The records a tuning run starts from and ends with (the tuner's input and output)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tileauto.artifact import KernelArtifact
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.records import Trial
from tileauto.search import Exhaustive, SearchStrategy
from tileauto.settings import Settings


@dataclass
class TuningProblem:
    """One tuning run: the factory with its problem arguments bound, the space, the options."""

    factory: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any]
    configs: list[dict[str, Any]]
    compile_args: CompileArgs
    profile_args: ProfileArgs
    settings: Settings
    captured_inputs: tuple | None = None
    timer: Any = None
    verbose: bool = True
    name: str = "kernel"
    known_trials: dict[str, Trial] = field(default_factory=dict)  # measured before (cache)
    search: SearchStrategy = field(default_factory=Exhaustive)


@dataclass
class TuningOutcome:
    """What the tuner hands back to the api layer."""

    trials: tuple[Trial, ...]
    default_trial: Trial
    best: Trial
    best_artifact: KernelArtifact | None
    ref_latency_ms: float | None
    tuning_s: float
    log_path: Path | None
    staging: Path
    compile_wall_s: float = 0.0  # from the start until the last compile finished
    workers: int = 1
