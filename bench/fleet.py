"""A fleet on one Redis: 16 processes, each with its own disk cache, on one cold key.

    python bench/fleet.py [--procs 16] [--size 256] [--space large|small]

The kernel is a tiled matmul; ``--space large`` (the default) tunes 72 configs (15-20 s on 2
cores), ``--space small`` the 12 of the first measurements (1.5-3 s), where a fleet's fixed
costs weigh as much as the tuning itself.

Starts a ``redis-server`` of its own (loopback, its own data folder), then measures, each in
fresh processes (``python bench/fleet.py --child``):

- **alone**: one process tunes the key with no remote cache (the baseline), and one process
  with the remote cache on (the lease, the publish: what the fleet's tuner does on a machine
  of its own);
- **fleet, signed**: ``--procs`` processes, each with its own empty disk cache (its own
  "machine"), against the Redis with ``TILEAUTO_REMOTE_CACHE_KEY`` set: one tunes, the others
  wait on its lease and load its signed kernel;
- **fleet, configs only**: the same without a key: the others compile the winner once each;
- **warm**: a fresh process with an empty disk cache and a remote hit (signed kernel, and
  configs only), against a fresh process with a local disk hit.

Every child imports everything and computes the key's parts once first (on a fleet each
process does that on its own node's cores; here 16 processes share this machine's), then
waits at a file barrier, so the processes of a fleet start tuning at one instant: the figure
is the wall time from that instant until the last process has its kernel. "alone" is the
median of one process measured before, between and after the fleets. The number of tunings is the number of children
whose result is not a cache hit; "tuner s" is the tuning process's own time to its kernel,
"handoff s" the time from it to the last process having its kernel (waking from the lease,
loading or compiling the winner). Goals: fleet <= 1.2 x alone, one tuning.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPACES = {
    # the first measurements' space: a tuning of 1-3 s, where a fleet's fixed costs weigh most
    "small": [{"bm": bm, "bn": bn} for bm in (4, 8, 16, 32) for bn in (8, 16, 32)],
    # a tuning of 10-30 s here (a GPU kernel's tuning takes minutes)
    "large": [
        {"bm": bm, "bn": bn, "ku": ku, "par": par}
        for bm in (4, 8, 16, 32)
        for bn in (8, 16, 32)
        for ku in (1, 4, 16)
        for par in (0, 1)
    ],
}
SPACE_VAR = "FLEET_BENCH_SPACE"  # how the parent tells its children the space


def matmul(M: int, N: int, K: int, bm: int = 8, bn: int = 8, ku: int = 1, par: int = 0):
    """``C = A @ B`` tiled by ``bm x bn``, the inner tile vectorized, the reduction unrolled by
    ``ku``, the outer rows in parallel when ``par``."""
    from tvm import s_tir, te

    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    i, j, kk = sch.get_loops(sch.get_sblock("C"))
    io, ii = sch.split(i, [None, bm])
    jo, ji = sch.split(j, [None, bn])
    ko, ki = sch.split(kk, [None, ku])
    sch.reorder(io, jo, ko, ki, ii, ji)
    sch.vectorize(ji)
    if ku > 1:
        sch.unroll(ki)
    if par:
        sch.parallel(io)
    return sch.mod["main"]


def child(size: int, barrier: str, out: str) -> None:
    """Import, wait at the barrier, get the tuned kernel; write the times to ``out``."""
    import redis  # noqa: F401 - imported before the barrier, as every module of the run
    import torch
    import tvm  # noqa: F401

    import tileauto
    import tileauto.jit.kernel  # noqa: F401
    from tileauto.cache.remote import family_of
    from tileauto.jit import compiler

    # the key's first computation (which installed code the factory reaches) too: on a fleet
    # each process pays these on its own node's cores; here 16 share 2
    family_of(matmul, (size, size, size), {})
    Path(barrier, f"ready-{os.getpid()}").touch()
    go = Path(barrier, "go")
    while not go.exists():  # the parent starts every child at one instant
        time.sleep(0.005)
    start = time.time()
    cpu0 = _cpu_s()
    tuner = tileauto.AutoTuner.from_kernel(matmul, SPACES[os.environ[SPACE_VAR]])
    tuner.args = (size, size, size)
    tuner.set_compile_args(out_idx=[-1], target="llvm")
    tuner.set_profile_args(warmup=2, rep=10)
    result = tuner.run(verbose=False)
    done = time.time()
    cpu = _cpu_s() - cpu0
    a, b = torch.rand(size, size), torch.rand(size, size)
    ok = bool(torch.allclose(result.kernel(a, b), a @ b, atol=1e-3, rtol=1e-3))
    remote = result.extra.get("remote")
    Path(out).write_text(
        json.dumps(
            {
                "start": start,
                "done": done,
                "cache_hit": result.cache_hit,
                "remote": remote["kernel"] if remote else None,
                "compiles": compiler.COMPILES.count,
                "cpu_s": cpu,
                "ok": ok,
            }
        )
    )


def _cpu_s() -> float:
    """CPU seconds of this process and of its ended children (compile and run workers)."""
    import resource

    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Redis:
    """A ``redis-server`` of this bench's own, ready when it answers PING."""

    def __init__(self, folder: Path) -> None:
        import redis

        exe = shutil.which("redis-server")
        if exe is None:
            sys.exit("redis-server is not installed: apt-get install -y redis-server")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(folder),
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.client = client

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def run_group(work: Path, name: str, envs: list[dict[str, str]], size: int) -> list[dict]:
    """Start one child per env, release them together; their reports (with ``t0``)."""
    barrier = work / f"{name}-barrier"
    barrier.mkdir()
    procs = []
    for k, extra in enumerate(envs):
        env = {**os.environ, **extra, "PYTHONPATH": str(ROOT)}
        env.setdefault("TILEAUTO_CACHE_DIR", str(work / f"{name}-cache-{k}"))
        out = work / f"{name}-{k}.json"
        cmd = [sys.executable, __file__, "--child", str(size), str(barrier), str(out)]
        procs.append((subprocess.Popen(cmd, env=env), out))
    while len(list(barrier.glob("ready-*"))) < len(envs):
        if any(p.poll() not in (None, 0) for p, _ in procs):
            sys.exit(f"{name}: a child died before the barrier")
        time.sleep(0.01)
    t0 = time.time()
    (barrier / "go").touch()
    reports = []
    for proc, out in procs:
        if proc.wait() != 0:
            sys.exit(f"{name}: a child failed ({proc.returncode})")
        reports.append({**json.loads(out.read_text()), "t0": t0})
    return reports


def summary(reports: list[dict]) -> dict:
    t0 = reports[0]["t0"]
    tuners = [r for r in reports if not r["cache_hit"]] or reports
    tuned = min(r["done"] for r in tuners)
    return {
        "wall_s": max(r["done"] for r in reports) - t0,
        "tuner_s": tuned - t0,  # the tuning itself, on a machine the fleet shares
        "handoff_s": max(r["done"] for r in reports) - tuned,  # published -> last has it
        "others_cpu_s": sorted(r["cpu_s"] for r in reports if r["cache_hit"]) or [0.0],
        "tunings": sum(not r["cache_hit"] for r in reports),
        "ok": all(r["ok"] for r in reports),
        "compiles_in_parents": sum(r["compiles"] for r in reports),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=16)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument(
        "--space", choices=sorted(SPACES), default="large",
        help="large: 72 configs (default); small: the first measurements' 12",
    )  # fmt: skip
    parser.add_argument("--child", nargs=3, metavar=("SIZE", "BARRIER", "OUT"))
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), args.child[1], args.child[2])
        return
    if args.procs < 2:
        parser.error(f"--procs: expected at least 2 processes, got {args.procs}")
    os.environ[SPACE_VAR] = args.space  # the children inherit it
    work = Path(tempfile.mkdtemp(prefix="tileauto-fleet-bench-"))
    redis = Redis(work)
    key = {"TILEAUTO_REMOTE_CACHE_KEY": "bench-fleet-key"}
    try:
        before = summary(run_group(work, "alone", [{}], args.size))
        signed_env = {"TILEAUTO_REMOTE_CACHE": redis.url, **key}
        # the fleet's tuner as it runs on a machine of its own: one process, the remote on
        one = summary(run_group(work, "one", [signed_env], args.size))
        redis.client.flushall()
        signed = summary(run_group(work, "signed", [signed_env] * args.procs, args.size))
        redis.client.flushall()
        between = summary(run_group(work, "alone-between", [{}], args.size))
        plain_env = {"TILEAUTO_REMOTE_CACHE": redis.url}
        plain = summary(run_group(work, "plain", [plain_env] * args.procs, args.size))
        after = summary(run_group(work, "alone-again", [{}], args.size))
        # the baseline: the median of one process alone before, between and after the fleets
        # (the machine's other load changes in between)
        walls = [before["wall_s"], between["wall_s"], after["wall_s"]]
        alone = {**before, "wall_s": statistics.median(walls)}
        alone["tuner_s"] = alone["wall_s"]
        # warm: the signed fleet's entry is in Redis again after this publish
        redis.client.flushall()
        run_group(work, "seed", [{**signed_env, "TILEAUTO_CACHE_DIR": str(work / "seeded")}],
                  args.size)  # fmt: skip
        warm: dict[str, list[float]] = {"remote, signed kernel": [], "remote, configs only": [],
                                        "local disk hit": []}  # fmt: skip
        for k in range(args.warm_runs):
            for n, (label, env) in enumerate(
                (
                    ("remote, signed kernel", signed_env),
                    ("remote, configs only", plain_env),
                    ("local disk hit", {"TILEAUTO_CACHE_DIR": str(work / "seeded")}),
                )
            ):
                env = {"TILEAUTO_CACHE_DIR": str(work / f"warm-{k}-{len(warm[label])}"), **env}
                (r,) = run_group(work, f"warm-{n}-{k}", [env], args.size)
                assert r["cache_hit"], f"{label}: not a cache hit"
                warm[label].append(r["done"] - r["start"])
    finally:
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"fleet bench: {args.procs} processes, matmul {args.size}^3, {len(SPACES[args.space])} "
          f"configs ({args.space}), "
          f"{os.cpu_count()} CPUs on this machine (shared by every process)")  # fmt: skip
    if sys.dont_write_bytecode:  # PYTHONDONTWRITEBYTECODE: each child compiles every module
        print("bytecode caches are off (PYTHONDONTWRITEBYTECODE): each process compiles the "
              "modules it imports, about 0.07 s of CPU a process here")  # fmt: skip
    print(f"{'run':<34} {'wall s':>8} {'x alone':>8} {'tuner s':>8} {'handoff s':>9} "
          f"{'tunings':>8} {'all ok':>7}")  # fmt: skip
    print(
        f"alone: {before['wall_s']:.2f} s before the fleets, {between['wall_s']:.2f} s between, "
        f"{after['wall_s']:.2f} s after (the median is the baseline)"
    )
    for label, s in (
        ("alone (1 process, no remote)", alone),
        ("1 process with the remote cache", one),
        (f"fleet, signed kernels ({args.procs})", signed),
        (f"fleet, configs only ({args.procs})", plain),
    ):
        ratio = s["wall_s"] / alone["wall_s"]
        print(
            f"{label:<34} {s['wall_s']:>8.2f} {ratio:>8.2f} {s['tuner_s']:>8.2f} "
            f"{s['handoff_s']:>9.2f} {s['tunings']:>8} {s['ok']!s:>7}"
        )
    for label, s in (("signed kernels", signed), ("configs only", plain)):
        others = s["others_cpu_s"]
        print(
            f"CPU s of the other {len(others)} processes, fleet {label}: median "
            f"{statistics.median(others):.2f}, max {max(others):.2f}, together "
            f"{sum(others):.1f}, on the cores the tuner uses (a fleet's nodes each have theirs)"
        )
    print(f"goal: fleet <= 1.2 x alone, 1 tuning; compiles in the fleet's own processes "
          f"(winner compiled on a hit): signed {signed['compiles_in_parents']}, "
          f"configs only {plain['compiles_in_parents']}")  # fmt: skip
    disk = statistics.median(warm["local disk hit"])
    print(f"\nwarm: a fresh process, from the tuning call to its kernel (median of "
          f"{args.warm_runs})")  # fmt: skip
    for label, times in warm.items():
        med = statistics.median(times)
        print(f"  {label:<28} {med * 1000:>8.1f} ms  {med / disk:>6.2f} x the disk hit")


if __name__ == "__main__":
    main()
