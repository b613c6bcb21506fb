"""One compile, and the results a build gives for it: what every build stage shares.

:func:`compile_job` is what a compile worker, a build thread or a Ray task runs; the result
helpers turn a failure into a :class:`BuildResult` with its status and message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tileauto.artifact import KernelArtifact
from tileauto.options import CompileArgs
from tileauto.records import BuildRequest, BuildResult, BuildStatus
from tileauto.space import merged_pass_configs, split_pass_configs


def compile_job(
    factory: Callable[..., Any], request: BuildRequest, compile_args: CompileArgs, out_dir: str
) -> KernelArtifact:
    """Compile ``request`` into ``out_dir`` (a config's own pass options over the call's)."""
    from tileauto.jit.compiler import compile_to_dir

    arguments, own = split_pass_configs(request.config)
    if own:
        compile_args = dataclasses.replace(
            compile_args, pass_configs=merged_pass_configs(compile_args.pass_configs, own)
        )
    kwargs = {**request.kwargs, **arguments}
    return compile_to_dir(
        factory, request.args, kwargs, compile_args, Path(out_dir), config=request.config
    )


def build_all(
    stage: Any,
    requests: Sequence[BuildRequest],
    on_result: Callable[[BuildResult], None] | None = None,
) -> list[BuildResult]:
    """Run ``stage.build`` on ``requests`` and return the results in the order of the requests
    (a stage hands them to ``on_result`` as each ends; this passes each on to ``on_result``
    too). For callers that want the whole batch: tests, benches, a one-off compile."""
    found: dict[int, BuildResult] = {}

    def collect(result: BuildResult) -> None:
        found[result.index] = result
        if on_result is not None:
            on_result(result)

    stage.build(requests, collect)
    return [found[r.index] for r in requests if r.index in found]


def first_lines(text: str, n: int = 6) -> str:
    """The first non-empty lines of a message (compiler errors are long)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    head = "\n".join(lines[:n])
    return head + (f"\n... ({len(lines) - n} more lines)" if len(lines) > n else "")


def error_text(type_name: str, message: str) -> str:
    """What a failed compile says: the first lines of its exception's message, named by the
    exception's type where the message is empty or the type is not an error at all (a
    factory's ``sys.exit(3)`` says ``SystemExit: 3``, a bare ``KeyboardInterrupt`` its name)."""
    text = first_lines(message)
    if not text:
        return type_name
    return f"{type_name}: {text}" if type_name in _NOT_ERRORS else text


_NOT_ERRORS = {"SystemExit", "KeyboardInterrupt", "GeneratorExit"}  # BaseException, not Exception


def memory_error(type_name: str, message: str) -> bool:
    """A MemoryError in the compile (``compile_to_dir`` reports a factory's exception as a
    CompileError whose message starts with the original type)."""
    return type_name == "MemoryError" or message.startswith("MemoryError")


def failed(
    request: BuildRequest, status: BuildStatus, error: str, compile_s: float = 0.0
) -> BuildResult:
    """The result of a compile that did not give a kernel."""
    return BuildResult(
        index=request.index,
        config=request.config,
        status=status,
        error=error,
        compile_s=compile_s,
    )
