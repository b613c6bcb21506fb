"""Local against Ray: a compile-heavy GEMM space tuned three ways, and Ray's per-job overhead.

    python bench/ray_scale.py [--configs 200] [--size 256] [--skip-local]

Tunes the first ``--configs`` configs of a large space of ``examples/gemm_cpu.py`` (its 16
register and cache tilings times ``unroll`` and ``block_K`` choices: 256 configs) with a
scripted timer (each config "takes" a fixed time: the bench measures compiles, not kernels),
the tuning cache off, in one process, three ways:

- local: the problem's own stages (``tileauto.tune.defaults``: a pool of compile processes,
  one run worker);
- ray 1 node: ``RayBuilder`` + ``RayRunner`` on a loopback cluster of one node with every
  core of this machine (a head without CPUs, the driver joined to it);
- ray 2 nodes: the same cores split over two nodes (each with half of them);
- again: later tunings of the same space in the same process, local and on the 1-node
  cluster (its Ray worker processes already started, as for a user's second kernel),
  alternating, ``--again`` pairs (the machine's noise moves one tuning by 10-15%): the median
  of each side and the median of the pairs' ratios. The local tunings of the pairs run with
  the idle cluster up: its daemons and idle workers took 5.5% of one core when measured
  (2026-11-24), which favours Ray by about 3% on 2 cores.

The loopback clusters get the Ray settings of the local cluster tileauto starts itself
(``LOCAL_SYSTEM_CONFIG``: idle workers are kept, so a second tuning reuses them).

It prints each one's wall time and compile phase (``TuningSession.compile_wall_s``) with its
ratio to local, side by side, then the per-job overhead of the engines: a no-op Ray task (one
at a time and many in flight), a no-op call to a Ray actor, and a no-op call to a local
``Worker`` (the local pool's unit), and the cluster's start-up time. Last, where the CPU of
the first local and the first 1-node tuning went, by process (compile workers, forkserver,
run worker or actor, memory watcher, Ray's own processes, the driver: ``_cpu_by_process.py``,
a sampler process), and the wall time Ray's extra CPU costs were all of it to wait for a core.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
os.environ["TILEAUTO_AUTO_TUNING_DISABLE_CACHE"] = "1"
os.environ["TILEAUTO_DISABLE_CACHE"] = "1"
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only

import gemm_cpu  # noqa: E402
from _cpu_by_process import CpuByProcess  # noqa: E402

from tileauto.options import ProfileArgs  # noqa: E402
from tileauto.settings import Settings  # noqa: E402
from tileauto.tune import defaults  # noqa: E402
from tileauto.tune.problem import TuningProblem  # noqa: E402
from tileauto.tune.session import TuningSession  # noqa: E402

TARGET = 1.2  # Ray on one node against local, wall time


def space(size: int, n: int) -> list[dict]:
    out: list[dict] = []
    for unroll in (4, 1, 2, 8):
        for block_k in (256, 64, 128, 512):
            for cfg in gemm_cpu.configs(size, size, size):
                c = {**cfg, "unroll": unroll, "block_K": block_k}
                if c not in out:
                    out.append(c)
    return out[:n]


def fixed_timer(func, args, *, warmup, rep, config, device):
    """The kernel runs once (it must work); the latency is a function of the config."""
    func(*args)
    ms = 1.0 + (config.get("block_M", 0) * 7 + config.get("block_K", 0)) % 97 / 100
    return [ms * 1e6] * rep


def problem(size: int, n: int, workers: int) -> TuningProblem:
    os.environ["TILEAUTO_AUTO_TUNING_CPU_COUNTS"] = str(workers)
    return TuningProblem(
        factory=gemm_cpu.gemm,
        args=(size, size, size),
        kwargs={},
        configs=space(size, n),
        compile_args=gemm_cpu.matmul.compile_args,
        profile_args=ProfileArgs(warmup_iters=1, rep_iters=2, retime_top_k=0),
        settings=Settings.from_env(),
        timer=fixed_timer,
        verbose=False,
        name="gemm",
    )


def timed(session: TuningSession) -> dict:
    """Run ``session``: its wall time, compile phase and winner."""
    start = time.perf_counter()
    result = session.run()
    return {
        "wall": time.perf_counter() - start,
        "compile": session.compile_wall_s,
        "config": result.config,
    }


def tune_local(size: int, n: int, workers: int, profile: bool = False) -> dict:
    p = problem(size, n, workers)
    if not profile:
        return timed(defaults.session(p))
    cpu = CpuByProcess()
    stage = defaults.default_runner(p)  # the problem's own run worker: learn its pid
    close = stage.close

    def closed():
        if stage.worker is not None and stage.worker.pid is not None:
            cpu.runs.add(stage.worker.pid)
        close()

    stage.close = closed
    # the problem's own builder, which applies the busy-machine rule for this runner too
    session = defaults.session(p, builder=defaults.default_builder(p), runner=stage)
    with cpu:
        out = timed(session)
    return {**out, "cpu": cpu.classify()}


def tune_ray_session(p: TuningProblem, rc, per_node: int, profile: bool = False) -> dict:
    from tileauto.scale.ray import RayBuilder, RayRunner

    staging = Path(tempfile.mkdtemp(prefix="tileauto-bench-ray-"))
    atexit.register(shutil.rmtree, staging, ignore_errors=True)
    builder = RayBuilder(p.factory, p.compile_args, staging_dir=staging, cluster=rc)
    runner = RayRunner(p.profile_args, threads=per_node, timer=p.timer, cluster=rc)
    session = defaults.session(p, builder=builder, runner=runner)
    if not profile:
        return timed(session)
    with CpuByProcess() as cpu:
        out = timed(session)
    workers = [runner.worker, *(lane.worker for lane in runner._lanes)]
    cpu.runs.update(pid for w in workers if w is not None for pid in w.pids)
    cpu.watchers.update(pid for w in workers if w is not None for pid in w.watcher_pids)
    return {**out, "cpu": cpu.classify()}


def tune_ray(size: int, n: int, nodes: int, cores: int, again: int = 0) -> dict:
    """A tuning on a fresh loopback cluster of ``nodes`` nodes; then ``again`` pairs of later
    tunings in the same process, a local one and one on the same cluster (its Ray workers
    already started, as for a user's second kernel), under ``"again"``."""
    import ray
    from ray.cluster_utils import Cluster

    from tileauto.scale.ray import LOCAL_SYSTEM_CONFIG, RayCluster

    t0 = time.perf_counter()
    cluster = Cluster(
        initialize_head=True,
        # the settings of the local cluster tileauto starts (executor="ray", no address)
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "_system_config": dict(LOCAL_SYSTEM_CONFIG),
        },
    )
    for _ in range(nodes):
        cluster.add_node(num_cpus=cores // nodes)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    up = time.perf_counter() - t0
    try:
        p = problem(size, n, cores)
        rc = RayCluster()
        # each node's run actor times with that node's cores (its own cores on a real
        # cluster; here the nodes share this machine's)
        per_node = max(1, cores // nodes)
        out = {**tune_ray_session(p, rc, per_node, profile=nodes == 1), "startup": up}
        out["again"] = [
            (
                tune_local(size, n, cores),
                tune_ray_session(problem(size, n, cores), RayCluster(), per_node),
            )
            for _ in range(again)
        ]
        out["overhead"] = overheads() if nodes == 1 else None
        return out
    finally:
        ray.shutdown()
        cluster.shutdown()


def _noop(x=None):
    return x


class _Echo:
    def call(self, x=None):
        return x


def overheads(n: int = 200) -> dict[str, float]:
    """Milliseconds per no-op job: Ray task (serial, pipelined), Ray actor call."""
    import ray

    task = ray.remote(_noop).options(num_cpus=1)
    ray.get(task.remote())  # a worker up
    t = time.perf_counter()
    for _ in range(n):
        ray.get(task.remote())
    serial = (time.perf_counter() - t) / n * 1e3
    t = time.perf_counter()
    ray.get([task.remote() for _ in range(n)])
    piped = (time.perf_counter() - t) / n * 1e3
    actor = ray.remote(_Echo).options(num_cpus=0).remote()
    ray.get(actor.call.remote())
    t = time.perf_counter()
    for _ in range(n):
        ray.get(actor.call.remote())
    actor_ms = (time.perf_counter() - t) / n * 1e3
    blob = b"x" * (200 << 10)  # a kernel folder's size, about (kernel.so + sources)
    t = time.perf_counter()
    for _ in range(n // 4):
        ray.get(actor.call.remote(blob))
    actor_200k = (time.perf_counter() - t) / (n // 4) * 1e3
    ray.kill(actor)
    return {
        "task serial": serial,
        "task pipelined": piped,
        "actor call": actor_ms,
        "actor call, 200 KiB arg": actor_200k,
    }


def median_row(runs: list[dict]) -> dict:
    return {
        "wall": statistics.median(r["wall"] for r in runs),
        "compile": statistics.median(r["compile"] for r in runs),
        "config": runs[0]["config"],
    }


def local_overhead(n: int = 200) -> float:
    from tileauto.workers.procs import Worker

    worker = Worker("bench").start()
    worker.call(_noop)
    t = time.perf_counter()
    for _ in range(n):
        worker.call(_noop)
    ms = (time.perf_counter() - t) / n * 1e3
    worker.close()
    return ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=200)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--again", type=int, default=3, help="pairs of later tunings")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    n = len(space(args.size, args.configs))
    print(f"{n} configs of gemm {args.size}^3 on {cores} cores (load {os.getloadavg()[0]:.1f})")
    rows: dict[str, dict] = {}
    if not args.skip_local:
        rows["local"] = tune_local(args.size, args.configs, cores, profile=True)
        print(f"  local done: {rows['local']['wall']:.1f} s", flush=True)
    ray1 = tune_ray(args.size, args.configs, 1, cores, again=max(1, args.again))
    rows["ray 1 node"] = ray1
    print(f"  ray 1 node done: {ray1['wall']:.1f} s", flush=True)
    if cores >= 2:
        rows["ray 2 nodes"] = tune_ray(args.size, args.configs, 2, cores)
    pairs = ray1["again"]
    k = len(pairs)
    rows[f"local, again x{k}"] = median_row([local for local, _ in pairs])
    rows[f"ray 1 node, again x{k}"] = median_row([ray for _, ray in pairs])
    base = rows.get("local")
    print(f"\n{'':20}{'wall s':>9}{'x local':>9}{'compile s':>11}{'x local':>9}{'start s':>9}")
    for name, r in rows.items():
        if "again" in name:
            ref = rows[f"local, again x{k}"]
            wr = f"{statistics.median(b['wall'] / a['wall'] for a, b in pairs):.2f}"
            cr = f"{statistics.median(b['compile'] / a['compile'] for a, b in pairs):.2f}"
            if name.startswith("local"):
                wr = cr = "1.00"
        else:
            ref = base
            wr = f"{r['wall'] / ref['wall']:.2f}" if ref else "-"
            cr = f"{r['compile'] / ref['compile']:.2f}" if ref else "-"
        st = f"{r['startup']:.1f}" if "startup" in r else "-"
        print(f"{name:20}{r['wall']:9.1f}{wr:>9}{r['compile']:11.1f}{cr:>9}{st:>9}")
    print(
        f"(again x{k}: {k} pairs of later tunings of the same space in the same process, a local "
        "one then one on the 1-node cluster, whose worker processes are already up: medians, "
        "and the median of the pairs' ratios; each pair's wall ratio: "
        + ", ".join(f"{b['wall'] / a['wall']:.2f}" for a, b in pairs)
        + ")"
    )
    for i, (local, ray) in enumerate(pairs):  # for the winners' check
        rows[f"again {i} local"], rows[f"again {i} ray"] = local, ray
    winners = {str(r["config"]) for r in rows.values()}
    print(f"same winner everywhere: {len(winners) == 1}")
    over = rows["ray 1 node"].get("overhead") or {}
    print("\nper-job overhead (ms, the mean over 200 no-op jobs):")
    for name, ms in over.items():
        print(f"  ray {name:28}{ms:8.2f}")
    print(f"  local Worker.call{'':15}{local_overhead():8.2f}")
    if base:
        per_cfg = (rows["ray 1 node"]["compile"] - base["compile"]) / n * 1e3
        print(f"\nray 1 node costs {per_cfg:+.0f} ms per config in the compile phase vs local")
        first = rows["ray 1 node"]["wall"] / base["wall"]
        again = statistics.median(b["wall"] / a["wall"] for a, b in pairs)
        print(
            f"ray 1 node / local, wall: {first:.2f}x (target <= {TARGET}: "
            f"{'met' if first <= TARGET else 'MISSED'}); a later tuning in the same process "
            f"(median of {k} pairs): {again:.2f}x ({'met' if again <= TARGET else 'MISSED'})"
        )
        where_it_goes(base, rows["ray 1 node"], cores)
    return 0


def where_it_goes(local: dict, ray: dict, cores: int) -> None:
    """The first tunings' CPU by process, side by side, and the wall time Ray's extra CPU
    alone costs on ``cores`` busy cores."""
    a, b = local.get("cpu"), ray.get("cpu")
    if not a or not b:
        return
    print("\nwhere the first tunings' CPU goes (CPU s by process, sampled every 0.2 s):")
    print(f"  {'':44}{'local':>8}{'ray 1 node':>12}")

    def cell(v: float | None) -> str:
        return f"{v:.2f}" if v is not None else "-"

    for kind in sorted(set(a) | set(b), key=lambda k: -max(a.get(k, 0.0), b.get(k, 0.0))):
        print(f"  {kind:44}{cell(a.get(kind)):>8}{cell(b.get(kind)):>12}")
    extra = sum(b.values()) - sum(a.values())
    print(f"  {'total':44}{sum(a.values()):8.2f}{sum(b.values()):12.2f}")
    est = local["wall"] + extra / cores
    print(
        f"Ray's {extra:.1f} s of CPU more, were every second of it to wait for one of the "
        f"{cores} cores: {extra / cores:.1f} s of wall more, {est:.1f} s "
        f"({est / local['wall']:.2f}x local); measured {ray['wall']:.1f} s "
        f"({ray['wall'] / local['wall']:.2f}x)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
