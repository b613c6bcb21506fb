"""Jobs for the Worker tests. Module-level so that they pickle by reference into the worker."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def add(a, b):
    return a + b


def pid():
    return os.getpid()


def environment(name):
    return os.environ.get(name)


def process_group():
    return os.getpgid(0)


def rss_bytes():
    import psutil

    return psutil.Process().memory_info().rss


def blocked_signals():
    """The signals this thread blocks, by name."""
    return sorted(signal.Signals(s).name for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))


def raise_value_error(message):
    raise ValueError(message)


def sleep(seconds):
    time.sleep(seconds)
    return seconds


def spawn_grandchild_and_sleep(pid_file, seconds):
    """Start ``sleep 60`` (a grandchild of the test process), record its pid, then hang."""
    child = subprocess.Popen(["sleep", "60"])
    Path(pid_file).write_text(str(child.pid))
    time.sleep(seconds)
    return child.pid


def say(fifo, word):
    """Write ``<word> <pid>`` to the fifo ``fifo`` (the test reads it to know where we are)."""
    fd = os.open(fifo, os.O_WRONLY)
    try:
        os.write(fd, f"{word} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def say_and_sleep(fifo, seconds):
    """Report that the job started, then run for ``seconds`` (a job in flight)."""
    say(fifo, "started")
    time.sleep(seconds)
    return seconds


def leave_temp_files_and_say(fifo, record, seconds):
    """Leave temp files as a compile killed half-way does (a folder of :mod:`tempfile`, as TVM's
    export makes; a file a program makes in ``$TMPDIR``, as ``g++`` does), write their paths
    to ``record``, report, then hang."""
    import tempfile

    folder = tempfile.mkdtemp()
    Path(folder, "lib0.o").write_bytes(b"\0" * 4096)
    made = subprocess.run(["mktemp"], capture_output=True, text=True, check=True).stdout.strip()
    Path(record).write_text(f"{folder}\n{made}\n")
    say(fifo, "started")
    time.sleep(seconds)


def temp_folders():
    """The worker's temp folder (:mod:`tempfile`, ``$TMPDIR``), the shared one, and the
    fallback lock folder this user's processes share."""
    import tempfile

    from tileauto.cache.folders import private_fallback_dir
    from tileauto.utils.tmp import shared_tempdir

    return (
        tempfile.gettempdir(),
        os.environ.get("TMPDIR"),
        shared_tempdir(),
        str(private_fallback_dir("locks")),
    )


def spawn_grandchild_and_say(fifo, seconds):
    """Start ``sleep 600`` (a grandchild of the test process), report its pid, then hang."""
    child = subprocess.Popen(["sleep", "600"])
    say(fifo, f"grandchild-{child.pid}")
    time.sleep(seconds)
    return child.pid


def segfault():
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(10)  # the signal is delivered before this returns


def exit_with(code):
    os._exit(code)


def allocate_and_hold(n_bytes, hold_s):
    """Allocate ``n_bytes`` and touch every page (resident, not just reserved), then hold it."""
    block = bytearray(b"\x01") * n_bytes
    time.sleep(hold_s)
    return len(block)


def torch_parallel_sum(threads):
    """An op that goes through torch's OpenMP pool; returns [threads used, the sum]."""
    import torch

    torch.set_num_threads(threads)
    return [torch.get_num_threads(), float(torch.ones(1 << 20).mul_(2).sum())]


def tvm_parallel_double(lib_path, build=False, n=1 << 20):
    """Run ``B = 2 * A`` as a TVM kernel with a parallel loop (TVM's thread pool) from
    ``lib_path``, building and exporting it first if ``build``; True if B is right."""
    import torch
    import tvm
    from tvm import s_tir, te

    if build:
        a = te.placeholder((n,), "float32", name="A")
        b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
        sch = s_tir.Schedule(te.create_prim_func([a, b]))
        (i,) = sch.get_loops(sch.get_sblock("B"))
        outer, _ = sch.split(i, [None, 1024])
        sch.parallel(outer)
        tvm.compile(sch.mod, target="llvm").export_library(str(lib_path))
    func = tvm.runtime.load_module(str(lib_path))["main"]
    x, y = torch.randn(n), torch.empty(n)
    func(x, y)
    return bool(torch.equal(y, x * 2))


def unpicklable_result():
    return lambda: None
