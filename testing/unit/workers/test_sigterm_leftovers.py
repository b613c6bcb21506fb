"""A SIGTERM that ends a process leaves nothing in the staging dir: not the temp folder of a
compile worker another thread was reaping (before or after it was renamed to ``.trash-*``), nor
the staging folder of a kernel being stored, nor a probe file another thread had open.

The same for the exit that follows a Ctrl-C. Each case runs in a child process that sends the
SIGTERM to itself at the point chosen (the handler runs right after ``os.kill`` returns, in the
main thread), then dies of it, or exits.
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

# another thread renamed a worker's folder to trash and is in the middle of deleting it (it
# never gets further here) when the signal comes: the handler finishes the delete
DELETING = """
import threading
from tileauto.cache import disk

folder = staging / "work-1-0123456789ab"
(folder / "sub").mkdir(parents=True)
(folder / "sub" / "cc.o").write_bytes(b"\\0" * 4096)
renamed, never = threading.Event(), threading.Event()

def reaper():
    trash = disk.to_trash(folder)
    print(trash.name, flush=True)
    renamed.set()
    never.wait()  # cut off here, by the process's end
    disk.discard(trash)

with kill_workers_on_sigterm():
    threading.Thread(target=reaper, daemon=True).start()
    renamed.wait()
    os.kill(os.getpid(), signal.SIGTERM)
print("not reached")
"""

# the same for a thread with a staging dir's write probe open
PROBING = """
import threading
from tileauto.cache import disk

created, never = threading.Event(), threading.Event()

def prober():
    with disk.probe_file(staging) as fd:
        os.write(fd, b"\\0" * 4096)
        created.set()
        never.wait()

with kill_workers_on_sigterm():
    threading.Thread(target=prober, daemon=True).start()
    created.wait()
    print(*sorted(p.name for p in staging.iterdir()), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
print("not reached")
"""


def run_child(tmp_path, body, returncode=-signal.SIGTERM):
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
    assert done.returncode == returncode, done.stderr
    assert "not reached" not in done.stdout
    return staging, done.stdout


def test_a_sigterm_while_a_kernel_is_stored_leaves_no_staging_folder(tmp_path):
    staging, _ = run_child(tmp_path, STORING)
    assert sorted(p.name for p in staging.iterdir()) == []


def test_a_sigterm_while_a_worker_is_reaped_leaves_no_temp_folder(tmp_path):
    staging, out = run_child(tmp_path, REAPING)
    assert out.startswith("work-")  # the worker had its folder
    assert sorted(p.name for p in staging.iterdir()) == []


def test_a_sigterm_finishes_the_delete_another_thread_had_under_way(tmp_path):
    staging, out = run_child(tmp_path, DELETING)
    assert out.startswith(".trash-")  # the folder was renamed before the signal
    assert sorted(p.name for p in staging.iterdir()) == []


def test_a_sigterm_removes_the_probe_file_another_thread_had_open(tmp_path):
    staging, out = run_child(tmp_path, PROBING)
    assert out.startswith(".probe-")
    assert sorted(p.name for p in staging.iterdir()) == []


def test_once_a_sigterm_holds_the_deletes_no_thread_starts_another(tmp_path):
    # what the handler does first: a reaper thread that comes to its folder afterwards waits
    # (for good: the process is dying) instead of leaving it renamed and half deleted
    code = textwrap.dedent(
        """
        import sys, threading
        from pathlib import Path
        from tileauto.cache import disk

        folder = Path(sys.argv[1]) / "work-1-0123456789ab"
        folder.mkdir()
        disk.hold_removals(1.0)
        disk.remove_tree(folder)  # this thread may go on (the handler's own clean-up)
        again = Path(sys.argv[1]) / "work-1-ba9876543210"
        again.mkdir()
        other = threading.Thread(target=disk.remove_tree, args=(again,), daemon=True)
        other.start()
        other.join(0.2)
        print(folder.exists(), other.is_alive(), again.exists())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]


def test_an_exit_finishes_the_delete_a_daemon_thread_had_under_way(tmp_path):
    # after Ctrl-C, say: the interpreter ends while a reaper thread is deleting a folder
    body = DELETING.replace("os.kill(os.getpid(), signal.SIGTERM)", "sys.exit(0)")
    body = body.replace('print("not reached")', "")
    staging, out = run_child(tmp_path, body, returncode=0)
    assert out.startswith(".trash-")
    assert sorted(p.name for p in staging.iterdir()) == []


def test_an_exit_removes_the_staging_folder_of_a_kernel_a_daemon_thread_was_storing(tmp_path):
    # a build slot's thread stores a kernel when the interpreter ends (after Ctrl-C, say)
    body = """
import threading
from tileauto.cache import disk

filling, never = threading.Event(), threading.Event()

def fill(out):
    (out / "kernel.so").write_bytes(b"\\\\0" * 4096)
    filling.set()
    never.wait()  # cut off here, by the process's end

def store():
    disk.write_entry(staging.parent / "cache" / "kernels" / "k", fill, {"format": "3"}, staging)

threading.Thread(target=store, daemon=True).start()
filling.wait()
print(*sorted(p.name for p in staging.iterdir()), flush=True)
sys.exit(0)
"""
    staging, out = run_child(tmp_path, body, returncode=0)
    assert out.startswith("stage-")
    assert sorted(p.name for p in staging.iterdir()) == []


def test_a_sigterm_while_a_result_is_saved_leaves_neither_staging_folder(tmp_path):
    # save_to_disk stages the entry inside a folder of its own beside the destination; that
    # one is under way too (it was left for the next save into the same folder to sweep)
    body = """
from tileauto.cache import disk

def fill(out):
    (out / "kernel.so").write_bytes(b"\\\\0" * 4096)
    print(*sorted(p.name for p in outer.iterdir()), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # the signal comes while the result is saved

outer = staging / ".saved.stage-0123456789ab"
with kill_workers_on_sigterm(), disk.scratch_folder(outer):
    disk.write_entry(staging / "saved", fill, {"format": "3"}, outer)
print("not reached")
"""
    staging, out = run_child(tmp_path, body)
    assert out.startswith("stage-")  # the entry's own staging folder, inside the save's
    assert sorted(p.name for p in staging.iterdir()) == []
