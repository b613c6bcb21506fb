"""A tuning that reports each of its phases on a fifo, for ``test_interrupts.py``.

Run as ``python -c "import interrupt_child; interrupt_child.main()"`` (importable, so the hooks
below travel to the workers by reference). Each phase writes ``<phase> <pid>`` to the fifo
named by ``TILEAUTO_TEST_PHASES``, from the process where it happens:

starting  a worker process is about to start (main process, any thread)
worker    a worker process was started (main process; the pid is the worker's)
compile   the factory runs (inside a compile worker)
supply    ``supply_prog`` makes the inputs (inside the run worker)
run       the first kernel call of a run worker (``pre_hook``)
timing    the timer starts on a config (inside the run worker)
cache     an entry's files are staged, before they are sealed and published (main process)

At the phase named by ``TILEAUTO_TEST_STOP_AT`` the process blocks for an hour: work in flight
that never ends, so an exit that waits for it fails the test's time bound; with
``TILEAUTO_TEST_STOP_COUNT=N``, at its N-th occurrence in that process. The space is ``full``
(with a segfaulting and a hanging config), ``quick`` or ``resume`` (four valid configs besides
the default; ``TILEAUTO_TEST_SPACE``).
"""

from __future__ import annotations

import os
import sys
import time

import torch
import tune_kernels

import tileauto

SPACES = {
    "full": [{"vec": 4}, {"mode": "segfault"}, {"mode": "hang"}, {"vec": 16}],
    "quick": [{"vec": 4}, {"vec": 16}],
    "resume": [{"vec": 4}, {"vec": 16}, {"vec": 2}, {"vec": 32}],
}


def report(phase: str, pid: int | None = None) -> None:
    """Tell the test that ``phase`` happened; block for good at the stop phase."""
    fd = os.open(os.environ["TILEAUTO_TEST_PHASES"], os.O_WRONLY)
    try:
        os.write(fd, f"{phase} {pid or os.getpid()}\n".encode())
    finally:
        os.close(fd)
    if phase != os.environ.get("TILEAUTO_TEST_STOP_AT"):
        return
    # counted in this process's environment (no global state: the hooks are part of the key)
    seen = int(os.environ.get("INTERRUPT_CHILD_SEEN", "0")) + 1
    os.environ["INTERRUPT_CHILD_SEEN"] = str(seen)
    if seen >= int(os.environ.get("TILEAUTO_TEST_STOP_COUNT") or 1):
        time.sleep(3600)  # in flight for good: only a kill ends it


def scale(n: int, vec: int = 8, mode: str = "ok"):
    """The tuned factory: ``tune_kernels.scale``, reporting each compile."""
    report("compile")
    return tune_kernels.scale(n, vec=vec, mode=mode)


def supply(params):
    report("supply")
    return [torch.randn(p.shape, dtype=p.dtype) for p in params]


def pre_hook(named):
    # the first kernel call of this process only (no global state: the hook is part of the key)
    if os.environ.get("INTERRUPT_CHILD_CALLED") != str(os.getpid()):
        os.environ["INTERRUPT_CHILD_CALLED"] = str(os.getpid())
        report("run")


def timer(func, args, *, warmup, rep, config, device):
    from tileauto.run.timing import cpu_timer

    report("timing")
    return cpu_timer()(func, args, warmup=warmup, rep=rep, config=config, device=device)


def _hook_main_process() -> None:
    """Report worker starts and cache writes, which happen in this process."""
    from tileauto.cache import disk
    from tileauto.workers import procs

    start = procs.Worker.start

    def reporting_start(self):
        report("starting")
        started = start(self)
        report("worker", self.pid)
        return started

    procs.Worker.start = reporting_start
    write_entry = disk.write_entry

    def reporting_write_entry(final, fill, *args, **kwargs):
        def reporting_fill(out):
            fill(out)
            report("cache")

        return write_entry(final, reporting_fill, *args, **kwargs)

    disk.write_entry = reporting_write_entry


def main() -> None:
    _hook_main_process()
    space = SPACES[os.environ.get("TILEAUTO_TEST_SPACE", "full")]
    tuned = tileauto.autotune(
        configs=space,
        warmup=1,
        rep=3,
        timeout=300,  # far past the test's bound: an exit that waits for a config fails it
        supply_prog=supply,
        pre_hook=pre_hook,
        timer=timer,
        verbose=False,
    )(tileauto.jit(out_idx=[-1], target="llvm")(scale))
    kernel = tuned(4096)
    a = torch.randn(4096)
    torch.testing.assert_close(kernel(a), a * 2)
    print("done", kernel.config, flush=True)
    sys.stdout.flush()
