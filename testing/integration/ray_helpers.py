"""Helpers of the Ray tests: a loopback Ray cluster on this machine, problems, sessions.

Importing this module makes every Ray process it starts use the loopback interface only
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray take 127.0.0.1 as the node address).
"""

from __future__ import annotations

import os

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback only (read at ray import)

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from tileauto.build.builder import Builder  # noqa: E402
from tileauto.options import ProfileArgs  # noqa: E402
from tileauto.run.runner import Runner  # noqa: E402
from tileauto.scale.ray import RayBuilder, RayCluster, RayRunner  # noqa: E402
from tileauto.settings import Settings  # noqa: E402
from tileauto.tune import defaults  # noqa: E402
from tileauto.tune.problem import TuningProblem  # noqa: E402

ray._private.ray_constants.ENABLE_RAY_CLUSTER = False  # in case ray was imported before


def node_id(node: Any) -> str:
    """The Ray node id of a node of ``Cluster`` (``Node.node_id`` on newer Rays; older ones
    are found by their object store's socket)."""
    found = getattr(node, "node_id", None)
    if found:
        return found
    socket = node.plasma_store_socket_name
    return next(n["NodeID"] for n in ray.nodes() if n["ObjectStoreSocketName"] == socket)


@contextlib.contextmanager
def local_cluster(nodes: int = 2, cpus: int = 1) -> Iterator[Cluster]:
    """A head without CPUs (it schedules nothing) and ``nodes`` nodes of ``cpus`` CPUs each,
    on loopback; the driver joined; everything stopped at the end."""
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False},
    )
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=cpus)
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def scripted_latency(func, args, *, warmup, rep, config, device):
    """A scripted timer: the kernel runs once (it must not crash), the latency is fixed by the
    config (vec=16 wins, slow loses)."""
    ms = {4: 3.0, 8: 2.0, 16: 1.0, 32: 1.5}[config["vec"]] * (
        5 if config.get("mode") == "slow" else 1
    )
    func(*args)
    return [ms * 1e6] * rep


def node_loss_latency(func, args, *, warmup, rep, config, device, folder, victim):
    """A scripted timer for a node lost during a run. A ``slow`` config timed on node
    ``victim`` writes ``folder/started`` and never returns (the node is removed under it); one
    timed elsewhere waits for that file (up to 100 s), so the other slots stay busy until a
    slow config is timed on the victim: which happens only if the slots run at once."""
    import time

    import ray as ray_

    func(*args)
    if config.get("mode") == "slow":
        started = Path(folder) / "started"
        if ray_.get_runtime_context().get_node_id() == victim:
            started.write_text(str(config))
            time.sleep(3600)  # killed with its node
        deadline = time.monotonic() + 100
        while not started.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("no slow config was timed on the victim node in 100 s")
            time.sleep(0.05)
    return scripted_latency(func, args, warmup=warmup, rep=rep, config=config, device=device)


def problem(
    configs: list[dict],
    *,
    timeout: float = 30.0,  # also bounds making the inputs: room for a loaded machine
    timer: Any = scripted_latency,
    factory: Any = None,
):
    from tune_kernels import scale, scale_jit

    return TuningProblem(
        factory=factory or scale,
        args=(4096,),
        kwargs={},
        configs=configs,
        compile_args=scale_jit.compile_args,
        profile_args=ProfileArgs(warmup_iters=1, rep_iters=3, timeout=timeout),
        settings=Settings.from_env(),
        timer=timer,
        verbose=False,
        name="scale",
    )


def ray_session(p: TuningProblem, staging: Path, cluster: RayCluster | None = None, **kw: Any):
    cluster = cluster or RayCluster()
    builder = RayBuilder(
        p.factory,
        p.compile_args,
        staging_dir=staging,
        timeout_s=p.settings.compile_timeout_s,
        cluster=cluster,
    )
    runner = RayRunner(
        p.profile_args,
        threads=1,
        device=p.device_type,
        captured=p.captured_inputs,
        timer=p.timer,
        cluster=cluster,
    )
    return defaults.session(p, builder=builder, runner=runner, **kw), builder, runner


def local_session(p: TuningProblem, staging: Path, **kw: Any):
    builder = Builder(p.factory, p.compile_args, workers=2, staging_dir=staging, timeout_s=60.0)
    runner = Runner(p.profile_args, threads=1, device=p.device_type, timer=p.timer)
    return defaults.session(p, builder=builder, runner=runner, **kw)


def comparable(trials) -> list[tuple]:
    """What a Ray run and a local run must agree on, per trial."""
    return [
        (
            t.index,
            dict(t.config),
            t.status,
            None if t.latency is None else dataclasses.astuple(t.latency),
        )
        for t in trials
    ]


# what differs between two runs that did the same: when, and how long things took
_VOLATILE = {"created", "compile_s", "export_s", "run_s", "tuning_s"}


def entry_files(entry: Path) -> dict[str, Any]:
    """Every file of a cache entry: its bytes, or for JSON its content without the volatile
    fields (and, in the manifest, without the hashes of the files that hold them).

    The LLVM sources are taken with their pointer values blanked: TVM names each buffer's
    alias-analysis (TBAA) type after the address of its object in the compiling process,
    which differs between any two compiles, local or not (the library is byte-identical).
    """
    import json
    import re

    def strip(value: Any) -> tuple[Any, bool]:
        if isinstance(value, dict):
            out, hit = {}, False
            for k, v in value.items():
                if k in _VOLATILE:
                    hit = True
                    continue
                out[k], sub = strip(v)
                hit = hit or sub
            return out, hit
        if isinstance(value, list):
            pairs = [strip(v) for v in value]
            return [p for p, _ in pairs], any(h for _, h in pairs)
        return value, False

    files: dict[str, Any] = {}
    volatile: set[str] = set()
    for path in sorted(p for p in entry.rglob("*") if p.is_file()):
        name = str(path.relative_to(entry))
        if path.suffix == ".json":
            files[name], hit = strip(json.loads(path.read_text()))
            if hit:
                volatile.add(name)
        elif name.endswith("_source.txt"):
            files[name] = re.sub(rb'!"0x[0-9a-f]+"', b'!"0x?"', path.read_bytes())
            volatile.add(name)
        else:
            files[name] = path.read_bytes()
    manifest = files.get("manifest.json")
    if manifest is not None:
        manifest["files"] = {k: v for k, v in manifest["files"].items() if k not in volatile}
    return files


def flaky_factory(n: int, vec: int = 8, mode: str = "ok", pid_dir: str = "", made: str = ""):
    """For builder tests: ``sleep`` never finishes compiling, ``die`` kills its process;
    ``pid_dir``: write the compiling process's id to ``pid_dir/<vec>``; ``made``: leave a
    temp folder (as TVM's export does) and write its path there."""
    import signal
    import tempfile
    import time

    from tune_kernels import scale

    if pid_dir:
        Path(pid_dir).mkdir(parents=True, exist_ok=True)
        (Path(pid_dir) / str(vec)).write_text(str(os.getpid()))
    if made:
        folder = tempfile.mkdtemp()
        Path(folder, "lib0.o").write_bytes(b"\0" * 4096)
        Path(made).write_text(folder)
    if mode == "sleep":
        time.sleep(3600)
    if mode == "die":
        os.kill(os.getpid(), signal.SIGSEGV)
    return scale(n, vec)


def stalling_on(victim: str):
    """The test factory, except that a compile on node ``victim`` never ends: the node-loss
    test removes that node under it, so the compile is surely in flight when it goes."""
    import functools

    from tune_kernels import scale

    @functools.wraps(scale)
    def factory(n: int, vec: int = 8, mode: str = "ok", repeat: int = 1):
        import threading

        import ray as ray_

        if ray_.is_initialized() and ray_.get_runtime_context().get_node_id() == victim:
            threading.Event().wait()  # never set: the node goes with this process
        return scale(n, vec, mode, repeat)

    return factory


def eventually(condition, limit_s: float = 60.0) -> bool:
    """A hang guard for what Ray does asynchronously (an actor kill, resources given back):
    True as soon as ``condition()`` holds, False after ``limit_s``."""
    import time

    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


GATED = """\
\"\"\"The test factory and timer, in a module that Ray nodes {banned} cannot import: it stands
in for a module of the user's that some nodes lack.\"\"\"

import ray

if ray.is_initialized() and ray.get_runtime_context().get_node_id() in {banned!r}:
    raise ModuleNotFoundError("No module named {name!r}", name={name!r})

import ray_helpers
from tune_kernels import scale


def factory(n, vec=8, mode="ok", repeat=1):
    return scale(n, vec, mode, repeat)


def timer(func, args, *, warmup, rep, config, device):
    return ray_helpers.scripted_latency(
        func, args, warmup=warmup, rep=rep, config=config, device=device
    )
"""


def gated_module(folder: Path, name: str, banned: set[str]) -> Any:
    """Module ``name``, written into ``folder`` (which must be on ``sys.path``) and imported:
    on the Ray nodes ``banned`` its import fails as if it were not there."""
    import importlib

    (folder / f"{name}.py").write_text(GATED.format(name=name, banned=sorted(banned)))
    return importlib.import_module(name)


KILL_AGENT = "RAY_HELPERS_KILL_AGENT"  # "<compile|time>:<agent>:<marker file>", read by both


def _kill_agent_once(phase: str) -> None:
    """Kill the Ray agent named in ``KILL_AGENT`` of this worker's node, once (the marker
    file says it was done): the raylet, this worker's parent, started it and dies with it;
    this worker then waits to go with its node (its job never answers)."""
    import threading

    import psutil

    wanted, _, rest = os.environ.get(KILL_AGENT, "").partition(":")
    agent, _, marker = rest.partition(":")
    if wanted != phase or Path(marker).exists():
        return
    Path(marker).write_text(agent)
    for proc in psutil.Process(os.getppid()).children():
        if proc.cmdline()[:1] == [f"ray::{agent}"]:
            proc.kill()
    threading.Event().wait()


def agent_killing_factory(n: int, vec: int = 8, mode: str = "ok", repeat: int = 1):
    """The test factory; the compile of ``vec=16`` kills a Ray agent first (see KILL_AGENT)."""
    from tune_kernels import scale

    if vec == 16:
        _kill_agent_once("compile")
    return scale(n, vec, mode, repeat)


def agent_killing_latency(func, args, *, warmup, rep, config, device):
    """:func:`scripted_latency`; timing ``vec=16`` kills a Ray agent first (see KILL_AGENT)."""
    if config["vec"] == 16:
        _kill_agent_once("time")
    return scripted_latency(func, args, warmup=warmup, rep=rep, config=config, device=device)


def aborting_check(results, expected):
    """A manual_check_prog that crashes its process (a bug in a native library it calls)."""
    import faulthandler

    faulthandler.disable()
    os.abort()


def hanging_check(results, expected):
    """A manual_check_prog that never returns."""
    import threading

    threading.Event().wait()


def aborting_when_retimed(named, exception=None):
    """A pre_hook that crashes its process only in the interleaved re-timing of the best
    configs (a hook that fails on later calls)."""
    import faulthandler
    import inspect

    if any(f.function == "retime" and "run/worker.py" in f.filename for f in inspect.stack()):
        faulthandler.disable()
        os.abort()
