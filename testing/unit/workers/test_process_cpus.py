"""A TVM pool that narrowed the caller's CPU mask does not shrink tileauto's count or workers.

TVM's pool pins the thread that starts it to the cores of its size (``TVM_NUM_THREADS=1``:
one core), and ``os.sched_getaffinity(0)`` reads the calling thread's mask. Read then, the
thread-count rule and the compile workers' count would halve on a 2-core machine, and every
worker forked from that thread would inherit the one core. tileauto counts the mask it saw when
it was imported, and gives its workers that mask. Checked in a fresh process, since the pin
cannot be undone in this one (the conftest puts the test thread's mask back after each test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, os
    os.environ["TVM_NUM_THREADS"] = "1"
    import tileauto
    from tileauto.jit import runtime
    from tileauto.machine import available_cpus
    from tileauto.workers.procs import Worker

    before = sorted(os.sched_getaffinity(0))
    runtime.num_threads()  # starts this thread's TVM pool, of 1 thread: TVM pins this thread
    pinned = sorted(os.sched_getaffinity(0))
    worker = Worker("test-cpus")
    try:
        in_worker = sorted(worker.call(os.sched_getaffinity, 0))
    finally:
        worker.close()
    print(json.dumps({"before": before, "pinned": pinned, "available": available_cpus(),
                      "worker": in_worker}))
    """
)


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs a CPU mask of 2 CPUs or more (os.sched_getaffinity)",
)
def test_a_tvm_pool_that_pinned_the_caller_does_not_narrow_the_count_or_the_workers():
    env = {k: v for k, v in os.environ.items() if k != "TVM_BIND_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if got["pinned"] == got["before"]:
        pytest.skip(f"TVM's pool did not narrow this thread's CPUs here ({got})")
    assert len(got["pinned"]) < len(got["before"])
    assert got["available"] == len(got["before"]), got
    assert got["worker"] == got["before"], got
