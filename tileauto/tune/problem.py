"""The record a tuning session starts from: the factory, its arguments, the space, the options."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tileauto.options import CompileArgs, ProfileArgs
from tileauto.settings import Settings
from tileauto.space import ProductSpace, tunable_parameters
from tileauto.space.view import SpaceView


@dataclass
class TuningProblem:
    """One tuning run: the factory with its problem arguments bound, the space, the options.

    Attributes:
        factory: the kernel factory (a function of the problem and the tunable arguments).
        args / kwargs: the problem arguments (plain Python values).
        configs: the space, after ``prune_configs_by``: a list of dicts of tunable arguments,
            or a :class:`~tileauto.space.ProductSpace` (decoded by index, never expanded).
        compile_args / profile_args: how configs are compiled, fed, checked and timed.
        settings: the ``TILEAUTO_*`` settings of this run (thread count applied).
        captured_inputs: inputs captured with ``set_autotune_inputs`` (None: made).
        timer: a custom timer (see :mod:`tileauto.run.timing`).
        verbose: show progress and the table.
        name: the kernel's name in reports.
        device_type: where the target's kernels run (``"cpu"`` or ``"cuda"``).
        jit_impl: the ``@jit`` factory, to compile a winner measured by an earlier run.
    """

    factory: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any]
    configs: list[dict[str, Any]] | ProductSpace
    compile_args: CompileArgs
    profile_args: ProfileArgs
    settings: Settings
    captured_inputs: tuple | None = None
    timer: Any = None
    verbose: bool = True
    name: str = "kernel"
    device_type: str = "cpu"
    jit_impl: Any = None

    @functools.cached_property
    def view(self) -> SpaceView:
        """The space by search index and config id, made once: the cache's key and the
        session read the same ids (a list of 10^5 configs is filled and keyed once)."""
        return SpaceView(self.configs, tunable_parameters(self.factory))

    @property
    def pruned(self) -> dict[str, int]:
        """How many configs each constraint of a product removed before compiling, in the part
        of the product checked (all of it, unless a budget stopped an exhaustive search)."""
        return self.configs.pruned_so_far if isinstance(self.configs, ProductSpace) else {}
