"""A SIGTERM that ends a process leaves nothing in the staging dir: not the temp folder of a
compile worker another thread was reaping, nor the staging folder of a kernel being stored.

Each case runs in a child process that sends the SIGTERM to itself at the point chosen (the
handler runs right after ``os.kill`` returns, in the main thread), then dies of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

GUARD_S = 300  # only against a hang

PRELUDE = """
import os, signal, sys
from pathlib import Path
from tileauto.workers.safety import kill_workers_on_sigterm
staging = Path(sys.argv[1])
"""

STORING = """
from tileauto.cache import disk

def fill(out):
    (out / "kernel.so").write_bytes(b"\\0" * 4096)
    os.kill(os.getpid(), signal.SIGTERM)  # the signal comes while the kernel is stored

with kill_workers_on_sigterm():
    disk.write_entry(staging.parent / "cache" / "kernels" / "k", fill, {"format": "3"}, staging)
print("not reached")
"""

REAPING = """
from tileauto.workers.procs import Worker

with kill_workers_on_sigterm():
    worker = Worker("sigterm-child", own_tmp=True).start()
    print(worker._tmp.path.name, flush=True)
    taken, worker._tmp = worker._tmp, None  # another thread is reaping it: the signal comes
    os.kill(os.getpid(), signal.SIGTERM)
print("not reached")
"""


def run_child(tmp_path, body):
    staging = tmp_path / "staging"
    staging.mkdir(mode=0o700)
    env = {**os.environ, "TILEAUTO_TMP_DIR": str(staging), "TILEAUTO_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PRELUDE + body), str(staging)],
        env=env,
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert "not reached" not in done.stdout
    return staging, done.stdout


def test_a_sigterm_while_a_kernel_is_stored_leaves_no_staging_folder(tmp_path):
    staging, _ = run_child(tmp_path, STORING)
    assert sorted(p.name for p in staging.iterdir()) == []


def test_a_sigterm_while_a_worker_is_reaped_leaves_no_temp_folder(tmp_path):
    staging, out = run_child(tmp_path, REAPING)
    assert out.startswith("work-")  # the worker had its folder
    assert sorted(p.name for p in staging.iterdir()) == []
