"""Workers forked from the caller: when it is safe, when it is not, and what the child drops.

Whether a fork is safe depends on the state of the whole process (its threads, what ran
before ``import tileauto``), so every case runs in a fresh interpreter: a script that prints
one JSON line with what it saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent  # testing/integration: tune_kernels
REPO = HERE.parents[1]
JOBS = REPO / "testing" / "unit" / "workers"  # jobs.py, shared with the Worker unit tests

PRELUDE = """
import json, os, sys, threading, time
"""


def _run(body: str, env: dict[str, str] | None = None, timeout: float = 240) -> dict:
    """Run ``body`` in a fresh interpreter; it must print one JSON object as its last line."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TILEAUTO_")}
    full_env["TILEAUTO_CACHE_DIR"] = os.environ["TILEAUTO_CACHE_DIR"]
    full_env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(JOBS), str(HERE)])
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_fresh_process_forks_its_workers():
    seen = _run(
        """
        import jobs
        import tileauto
        from tileauto.workers.procs import Worker, fork_unsafe_reason

        reason = fork_unsafe_reason()
        w = Worker("forked", env={"OMP_NUM_THREADS": "2"}, fork_ok=True).start()
        print(json.dumps({
            "reason": reason,
            "method": w.start_method,
            "pid": w.call(jobs.pid),
            "me": os.getpid(),
            "pgid": w.call(jobs.process_group),
            "parallel": w.call(jobs.torch_parallel_sum, 2),
        }))
        """
    )
    assert seen["reason"] is None
    assert seen["method"] == "fork"
    assert seen["pid"] != seen["me"] and seen["pgid"] == seen["pid"]
    assert seen["parallel"] == [2, float(1 << 20) * 2]  # an OpenMP op ran with 2 threads


@pytest.mark.slow
def test_a_worker_not_marked_fork_ok_uses_the_forkserver():
    seen = _run(
        """
        import tileauto
        from tileauto.workers.procs import Worker

        print(json.dumps({"method": Worker("plain").start().start_method}))
        """
    )
    assert seen["method"] == "forkserver"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setup", "fragment"),
    [
        (
            "t = threading.Thread(target=time.sleep, args=(30,), daemon=True); t.start()",
            "other Python threads are running",
        ),
        ("os.environ['TILEAUTO_WORKER_START'] = 'forkserver'", "TILEAUTO_WORKER_START=forkserver"),
    ],
    ids=["python-thread", "setting"],
)
def test_an_unsafe_process_starts_workers_from_the_forkserver(setup, fragment):
    seen = _run(
        f"""
        import jobs
        import tileauto
        from tileauto.workers.procs import Worker, fork_unsafe_reason

        {setup}
        w = Worker("guarded", fork_ok=True).start()
        print(json.dumps({{
            "reason": fork_unsafe_reason(),
            "method": w.start_method,
            "works": w.call(jobs.add, 2, 3),
        }}))
        """
    )
    assert fragment in seen["reason"]
    assert seen["method"] == "forkserver"
    assert seen["works"] == 5


def test_not_the_main_thread_is_a_reason():
    seen = _run(
        """
        import tileauto
        from tileauto.workers.procs import fork_unsafe_reason

        out = {}
        t = threading.Thread(target=lambda: out.update(reason=fork_unsafe_reason()))
        t.start(); t.join()
        print(json.dumps(out))
        """
    )
    assert seen["reason"] == "not called from the main thread"


@pytest.mark.slow
def test_running_thread_pools_in_the_caller_do_not_stop_a_fork(tmp_path):
    """The caller's OpenMP and TVM pools are running (a fork would copy them broken); the
    forked worker runs its jobs in a thread of its own, with new pools, and both work."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs: with one, neither library starts a pool")
    lib = tmp_path / "double.so"
    seen = _run(
        f"""
        import jobs
        import torch
        import tileauto
        from tileauto.workers.procs import Worker, fork_unsafe_reason

        torch.set_num_threads(2)
        torch.ones(1 << 20).mul_(2).sum()  # torch's OpenMP pool starts
        jobs.tvm_parallel_double({str(lib)!r}, build=True)  # TVM's pool starts
        w = Worker("pools", env={{"OMP_NUM_THREADS": "2", "TVM_NUM_THREADS": "2"}},
                   fork_ok=True).start()
        print(json.dumps({{
            "reason": fork_unsafe_reason(),
            "method": w.start_method,
            "torch": w.call(jobs.torch_parallel_sum, 2, timeout_s=60),
            "tvm": w.call(jobs.tvm_parallel_double, {str(lib)!r}, timeout_s=60),
        }}))
        """
    )
    assert seen["reason"] is None and seen["method"] == "fork"
    assert seen["torch"] == [2, float(1 << 20) * 2]
    assert seen["tvm"] is True


@pytest.mark.slow
def test_a_worker_that_fails_its_probe_falls_back_to_the_forkserver():
    """A forked worker whose probe hangs is killed; this and later workers use the
    forkserver, and the failed probe is not counted against the worker."""
    seen = _run(
        """
        import jobs
        import tileauto
        from tileauto.workers import procs

        procs._PROBE_TIMEOUT_S = 2.0
        procs._probe_threads = lambda threads: time.sleep(60)  # as if OpenMP hung
        w = procs.Worker("probed", fork_ok=True).start()
        second = procs.Worker("second", fork_ok=True).start()
        print(json.dumps({
            "method": w.start_method,
            "works": w.call(jobs.add, 2, 3),
            "after": procs.fork_unsafe_reason(),
            "second": second.start_method,
            "restarts": w.restarts,
        }))
        """
    )
    assert seen["method"] == "forkserver" and seen["works"] == 5
    assert "failed its OpenMP probe" in seen["after"] and "timed out" in seen["after"]
    assert seen["second"] == "forkserver"
    assert seen["restarts"] == 0


def test_a_forked_worker_has_a_temp_folder_its_caller_removes():
    """The folder is made and claimed before the fork: made in the child, it was the child's,
    and every forked worker left one behind."""
    staging = Path(os.environ["TILEAUTO_CACHE_DIR"]) / "tmp"
    before = set(staging.glob("work-*"))
    seen = _run(
        """
        import jobs
        import tileauto
        from tileauto.workers.procs import Worker

        w = Worker("forked-tmp", fork_ok=True, own_tmp=True).start()
        own = w.call(jobs.temp_folders)[0]
        mine = str(w._tmp.path)
        w.kill()
        second = w.call(jobs.temp_folders)[0]
        print(json.dumps({
            "method": w.start_method,
            "own": own,
            "mine": mine,
            "gone": not os.path.exists(own),
            "second": second,
            "pid": os.getpid(),
        }))
        """
    )
    assert seen["method"] == "fork"
    assert seen["own"] == seen["mine"] and f"work-{seen['pid']}-" in seen["own"]
    assert seen["gone"] and seen["second"] != seen["own"]
    assert not os.path.exists(seen["second"]), "left behind at the caller's exit"
    assert set(staging.glob("work-*")) == before


@pytest.mark.slow
def test_a_forked_worker_drops_the_pipes_of_the_others():
    """Closing one worker's pipe ends it (EOF) although a sibling was forked after it."""
    seen = _run(
        """
        import tileauto
        from tileauto.workers.procs import Worker

        first = Worker("first", fork_ok=True).start()
        second = Worker("second", fork_ok=True).start()
        proc = first._proc
        first._conn.close()
        proc.join(timeout=10)
        print(json.dumps({
            "methods": [first.start_method, second.start_method],
            "exitcode": proc.exitcode,
        }))
        """
    )
    assert seen["methods"] == ["fork", "fork"]
    assert seen["exitcode"] == 0  # left its loop on EOF, not killed


@pytest.mark.slow
def test_the_memory_limit_counts_what_a_forked_worker_adds():
    """A forked child starts as large as its caller; the limit applies to what it allocates."""
    seen = _run(
        """
        import jobs
        import tileauto
        from tileauto.errors import WorkerError
        from tileauto.workers.procs import Worker

        ballast = bytearray(600 * 2**20)  # the caller holds 600 MiB, resident
        limit = 400 * 2**20
        w = Worker("limited", memory_limit_bytes=limit, fork_ok=True).start()
        small = w.call(jobs.allocate_and_hold, 100 * 2**20, 0.5)
        try:
            w.call(jobs.allocate_and_hold, 800 * 2**20, 30.0, timeout_s=60)
            big = "no error"
        except WorkerError as exc:
            big = str(exc)
        print(json.dumps({
            "method": w.start_method, "rss": jobs.rss_bytes(), "small": small, "big": big,
        }))
        """
    )
    assert seen["method"] == "fork"
    assert seen["rss"] > 600 * 2**20  # above the limit before the worker allocates anything
    assert seen["small"] == 100 * 2**20
    assert "out of memory" in seen["big"] and "more than 400.0 MiB" in seen["big"]


@pytest.mark.slow
def test_a_cold_cpu_tuning_forks_its_workers(tmp_path):
    """The tuner forks the compile workers and the run worker of a CPU tuning, and the
    result is the same kind as with the forkserver."""
    body = """
        import tileauto
        from tileauto.build import builder
        from tileauto.workers import procs
        import tune_kernels

        started = []
        original = procs.Worker._started
        def record(self, proc, conn, method):
            started.append((self.name, method))
            original(self, proc, conn, method)
        procs.Worker._started = record

        from tileauto.workers.pool import WorkerPool
        tuned = tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}, {"vec": 16}],
                                  warmup=2, rep=5)(tileauto.jit(out_idx=[-1], target="llvm")(
                                  tune_kernels.scale))
        kernel = tuned(64)
        print(json.dumps({
            "started": started,
            "config": kernel.config,
            "alive": [w.alive for w in WorkerPool.shared().workers],
            "methods": [w.start_method for w in WorkerPool.shared().workers],
        }))
    """
    env = {"TILEAUTO_CACHE_DIR": str(tmp_path / "cache")}
    forked = _run(body, env=env)
    env["TILEAUTO_WORKER_START"] = "forkserver"
    env["TILEAUTO_CACHE_DIR"] = str(tmp_path / "cache2")
    served = _run(body, env=env)
    assert sorted({m for _, m in forked["started"]}) == ["fork"]
    assert {n for n, _ in forked["started"]} >= {"compile-0", "run-cpu"}
    assert sorted({m for _, m in served["started"]}) == ["forkserver"]
    # forked compile workers end with the tuning (they would hold on to memory the caller
    # frees later); forkserver workers stay for the next one
    assert set(forked["methods"]) == {"fork"} and not any(forked["alive"])
    assert set(served["methods"]) == {"forkserver"} and all(served["alive"])
    assert forked["config"]["vec"] in (4, 8, 16) and served["config"]["vec"] in (4, 8, 16)


@pytest.mark.slow
def test_par_compile_forks_its_workers_and_a_gpu_target_does_not(tmp_path):
    seen = _run(
        """
        import tileauto
        from tileauto.build.builder import Builder
        from tileauto.options import CompileArgs
        from tileauto.workers import procs
        import tune_kernels

        started = []
        original = procs.Worker._started
        def record(self, proc, conn, method):
            started.append(method)
            original(self, proc, conn, method)
        procs.Worker._started = record

        kernels = tune_kernels.scale_jit.par_compile([{"n": 64, "vec": 4}, {"n": 64, "vec": 8}])
        gpu = Builder(tune_kernels.scale, CompileArgs(target={"kind": "cuda", "arch": "sm_90"}),
                      workers=1, staging_dir=".")
        print(json.dumps({
            "started": started,
            "ok": [bool(k) for k in kernels],
            "gpu": gpu.fork_unsafe_reason(),
        }))
        """,
    )
    assert seen["ok"] == [True, True]
    assert seen["started"] and set(seen["started"]) == {"fork"}
    assert seen["gpu"] == "a GPU target"


@pytest.mark.slow
def test_a_second_tuning_in_the_process_forks_again(tmp_path):
    """Nothing the first tuning leaves behind (a progress bar's monitor thread, say) stops
    the second one from forking."""
    seen = _run(
        """
        import tileauto
        from tileauto.workers import procs
        import tune_kernels

        runs = []
        original = procs.Worker._started
        def record(self, proc, conn, method):
            runs[-1].append(method)
            original(self, proc, conn, method)
        procs.Worker._started = record

        impl = tileauto.jit(out_idx=[-1], target="llvm")(tune_kernels.scale)
        for n in (64, 128):
            runs.append([])
            tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}], warmup=2, rep=5,
                              verbose=True)(impl)(n)
        print(json.dumps({"runs": runs, "threads": threading.active_count()}))
        """,
        env={"TILEAUTO_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert [set(run) for run in seen["runs"]] == [{"fork"}, {"fork"}]
    assert seen["threads"] == 1
