"""Builds and runs over Ray (issue 11): a loopback cluster of 2 nodes on this machine.

One cluster serves the whole module (a head without CPUs and two 1-CPU nodes: ~8 s to start);
the node-loss test adds a third node and removes it during a tuning. The stages are plugged
into a ``TuningSession`` directly (``builder=RayBuilder(...)``, ``runner=RayRunner(...)``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest

ray = pytest.importorskip("ray")

import ray_helpers as h  # noqa: E402

from tileauto import TrialStatus  # noqa: E402
from tileauto.build.builder import BuildRequest, BuildStatus  # noqa: E402
from tileauto.build.job import build_all  # noqa: E402
from tileauto.errors import TileautoError  # noqa: E402
from tileauto.scale.ray import (  # noqa: E402
    NoMatchingNodeError,
    RayBuilder,
    RayCluster,
    import_ray,
)
from tileauto.testing import RecordingReporter  # noqa: E402

MIXED = [
    {"vec": 4},
    {"mode": "compile"},
    {"mode": "wrong"},
    {"mode": "segfault"},
    {"mode": "hang"},
    {"vec": 16},
    {"mode": "slow", "repeat": 64},
]
# the hanging config's timeout, which also bounds making the inputs in the run worker (5 s
# was too short for that on a loaded machine; each hang costs this long, twice)
HANG_S = 15.0
EXPECTED = {
    0: TrialStatus.OK,
    1: TrialStatus.COMPILE_ERROR,
    2: TrialStatus.MISMATCH,
    3: TrialStatus.CRASH,
    4: TrialStatus.TIMEOUT,
    5: TrialStatus.OK,
    6: TrialStatus.OK,
}


@pytest.fixture(scope="module")
def cluster():
    with h.local_cluster(nodes=2, cpus=1) as c:
        yield c


def test_without_ray_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(TileautoError, match=r"tileauto\[ray\]"):
        import_ray()


@pytest.mark.timeout(180)
def test_warm_up_probes_the_nodes_and_its_workers_compile(cluster, tmp_path):
    """``start`` probes each node (no CPU) and warms a worker per compile slot: the warm-ups
    import TVM's compiler, and their workers, not fresh ones, run the compiles; a core hold
    comes and goes. First of the module's cluster tests: no idle worker of an earlier test
    around."""
    from tune_kernels import scale_jit

    from tileauto.scale.ray import node as ray_node
    from tileauto.scale.ray import nodes as ray_nodes

    rc = RayCluster()
    builder = RayBuilder(h.flaky_factory, scale_jit.compile_args, staging_dir=tmp_path, cluster=rc)
    builder.start()
    warm = list(builder._warming)
    assert len(warm) == builder.workers == 2  # one per compile slot (1 CPU on each node here)
    compute_nodes = sorted(n for n, r in rc.nodes().items() if r.get("CPU"))
    assert sorted(ray_nodes.matching_nodes(rc, "cpu")) == compute_nodes
    assert rc.take_probes() == {}  # matching_nodes took the builder's
    probed = [rc.probed[n] for n in compute_nodes]
    assert sorted(a["node"] for a in probed) == compute_nodes
    assert all(a["hardware"] == ray_node.local_hardware("cpu") for a in probed), probed
    answers = ray.get(warm, timeout=120)
    assert sorted(a["node"] for a in answers) == compute_nodes
    # the compiler is imported: a first compile there does not import it (over a second)
    assert all(a["tvm"] for a in answers), answers
    pids = tmp_path / "pids"
    requests = [
        BuildRequest(index=i, config={"vec": v, "pid_dir": str(pids)}, args=(1024,))
        for i, v in enumerate((4, 8, 16, 32))
    ]
    results = build_all(builder, requests)
    assert all(r.ok for r in results), results
    assert builder.submitted == 4  # warm-ups are not compiles
    compiled_in = {int(f.read_text()) for f in pids.iterdir()}
    assert compiled_in <= {a["pid"] for a in answers}, (compiled_in, answers)
    builder.close()
    # a later build of this process: the nodes are warm (Ray keeps idle workers), no warm-up
    again = RayBuilder(h.flaky_factory, scale_jit.compile_args, staging_dir=tmp_path, cluster=rc)
    again.start()
    assert again._warming == {}
    assert sorted(ray_nodes.matching_nodes(rc, "cpu")) == compute_nodes  # probed all the same
    assert all(r.ok for r in build_all(again, requests))
    again.close()
    node = compute_nodes[0]
    rc.hold_cores(node)
    assert h.eventually(lambda: ray.available_resources().get("CPU", 0) == 1)
    rc.release_cores()
    assert h.eventually(lambda: ray.available_resources().get("CPU", 0) == 2)


@pytest.mark.timeout(300)
def test_fault_matrix_and_results_match_a_local_run(cluster, tmp_path):
    # folders go to the driver and to the run actor as bytes, as between machines
    session, _, runner = h.ray_session(
        h.problem(MIXED, timeout=HANG_S), tmp_path / "ray", RayCluster(share_files=False)
    )
    ray_result = session.run()
    assert not runner.worker.shares_files
    assert not any(tmp_path.glob("ray/**/.tileauto-ray-*"))  # no token: nothing shared
    local_result = h.local_session(h.problem(MIXED, timeout=HANG_S), tmp_path / "local").run()
    for index, status in EXPECTED.items():
        assert ray_result.trials[index].status is status, ray_result.trials[index]
    assert "deliberate compile failure" in ray_result.trials[1].error
    assert "Ray run actor died" in ray_result.trials[3].error
    assert f"timed out after {HANG_S:g} s" in ray_result.trials[4].error
    # the same trials (index, config, status, latency statistics) and the same winner
    assert h.comparable(ray_result.trials) == h.comparable(local_result.trials)
    assert ray_result.config == local_result.config == {"mode": "ok", "repeat": 1, "vec": 16}
    assert ray_result.latency == local_result.latency == pytest.approx(1.0)
    assert h.comparable([ray_result.default_trial]) == h.comparable([local_result.default_trial])
    # the winner was staged on the driver like a local build: its kernel runs here
    import torch

    a = torch.randn(4096)
    torch.testing.assert_close(ray_result.kernel(a), a * 2)


def test_no_matching_node_is_an_error_before_anything_compiles(cluster, tmp_path, monkeypatch):
    from tileauto.scale.ray import nodes as ray_nodes

    monkeypatch.setattr(ray_nodes, "local_hardware", lambda device: {"device": "elsewhere"})
    session, builder, _ = h.ray_session(h.problem([{"vec": 4}]), tmp_path)
    with pytest.raises(NoMatchingNodeError, match="no node of the Ray cluster matches"):
        session.run()
    assert builder.submitted == 0


@pytest.mark.timeout(240)
def test_a_node_that_lacks_a_module_of_the_tuning_is_left_out(cluster, tmp_path, monkeypatch):
    """A module of the factory and timer that one node cannot import: that node's compiles go
    to the other node and its run actor is not used, and no config is failed for it; the
    tuning is the local one. Where no node can import it, the tuning stops with one error
    that names the module (not a compile error per config)."""
    monkeypatch.syspath_prepend(str(tmp_path))  # the driver's path: sent to the workers
    compute = sorted(n for n, r in RayCluster().nodes().items() if r.get("CPU"))
    banned = compute[0]
    gated = h.gated_module(tmp_path, "gated_on_one", {banned})
    space = [{"vec": v} for v in (4, 8, 16, 32, 4, 8)]
    session, builder, runner = h.ray_session(
        h.problem(space, factory=gated.factory, timer=gated.timer), tmp_path / "one"
    )
    result = session.run()
    assert all(t.status is TrialStatus.OK for t in result.trials), result.trials
    assert result.config == {"vec": 16}
    # its run actor started there (a run slot per node), loaded nothing and was not used
    assert list(runner.unfit) == [banned]
    assert "No module named 'gated_on_one'" in runner.unfit[banned]
    assert runner.nodes == compute[1:]
    # compiles that landed there went to the other node
    assert set(builder.unfit) <= {banned}
    local = h.local_session(h.problem(space), tmp_path / "local").run()
    assert h.comparable(result.trials) == h.comparable(local.trials)

    gated = h.gated_module(tmp_path, "gated_everywhere", set(compute))
    session, builder, _ = h.ray_session(
        h.problem(space, factory=gated.factory, timer=gated.timer), tmp_path / "all"
    )
    with pytest.raises(NoMatchingNodeError, match="No module named 'gated_everywhere'") as info:
        session.run()
    assert "working_dir" in str(info.value)  # what to do about it
    assert sorted(builder.unfit) == compute
    assert h.eventually(lambda: ray.available_resources().get("CPU", 0) == 2)  # nothing held


def test_an_exception_out_of_a_compile_task_is_a_compile_error_with_its_cause(cluster, tmp_path):
    """What a compile task lets out (tileauto's code, not the compiler's: that one is caught
    in the task) is the config's compile_error with the cause's type and message, without
    the terminal colours of Ray's error text; not a crash."""
    from tune_kernels import scale_jit

    from tileauto.scale.ray.build import _Event, _Job

    @ray.remote(num_returns="streaming", max_retries=0)
    def raising():
        yield "a node"
        raise ValueError("\x1b[31mbroken\x1b[39m here")

    builder = RayBuilder(
        h.flaky_factory, scale_jit.compile_args, staging_dir=tmp_path, cluster=RayCluster()
    )
    job = _Job(0, ref=raising.remote())
    request = BuildRequest(index=0, config={"vec": 4}, args=(1024,))
    assert builder._answer(ray, job, request, tmp_path) is _Event.STARTED
    result = builder._answer(ray, job, request, tmp_path)
    assert result.status is BuildStatus.ERROR, result
    assert result.error == "ValueError: broken here"


@pytest.mark.timeout(180)
def test_compile_timeout_crash_and_cancel(cluster, tmp_path):
    from tune_kernels import scale_jit

    builder = RayBuilder(
        h.flaky_factory,
        scale_jit.compile_args,
        staging_dir=tmp_path,
        timeout_s=10.0,
        cluster=RayCluster(),
    )
    requests = [
        BuildRequest(index=i, config=c, args=(1024,))
        for i, c in enumerate([{"vec": 4}, {"mode": "sleep"}, {"mode": "die"}])
    ]
    got = []
    results = build_all(builder, requests, got.append)
    assert [r.index for r in results] == [0, 1, 2]
    assert sorted(r.index for r in got) == [0, 1, 2]  # each once, as it ended
    assert results[0].ok and results[0].artifact.lib_path.is_file()
    assert results[0].artifact.directory.parent.parent == tmp_path  # staged on the driver
    assert results[1].status is BuildStatus.TIMEOUT, results[1]
    assert results[2].status is BuildStatus.CRASH, results[2]
    assert builder.submitted == 3  # a deterministic crash is never run again
    assert builder.resubmitted == 0

    # cancel from on_result: the compile in flight is killed, the rest is cancelled
    builder2 = RayBuilder(
        h.flaky_factory, scale_jit.compile_args, staging_dir=tmp_path, cluster=RayCluster()
    )
    requests = [
        BuildRequest(index=0, config={"vec": 4}, args=(1024,)),
        BuildRequest(index=1, config={"mode": "sleep"}, args=(1024,)),
        BuildRequest(index=2, config={"mode": "sleep"}, args=(1024,)),
    ]
    results = build_all(builder2, requests, lambda result: builder2.cancel())
    statuses = [r.status for r in results]
    assert statuses == [BuildStatus.OK, BuildStatus.CANCELLED, BuildStatus.CANCELLED]
    assert h.eventually(lambda: ray.available_resources().get("CPU", 0) == 2)


@pytest.mark.timeout(180)
def test_a_compile_killed_on_its_node_leaves_no_temp_files(cluster, tmp_path):
    """The killed task's temp folder was its own; the next compile task on the machine
    removes it (its claim ended with the killed process). Before, TVM's and g++'s temp files
    of a timed-out compile stayed in the node's /tmp."""
    from tune_kernels import scale_jit

    builder = RayBuilder(
        h.flaky_factory,
        scale_jit.compile_args,
        staging_dir=tmp_path / "stage",
        timeout_s=10.0,
        cluster=RayCluster(),
    )
    record = tmp_path / "made.txt"
    hung = {"mode": "sleep", "made": str(record)}
    (result,) = build_all(builder, [BuildRequest(index=0, config=hung, args=(1024,))], None)
    assert result.status is BuildStatus.TIMEOUT, result
    made = Path(record.read_text())
    assert made.parent.name.startswith("work-"), made  # not the system's temp folder
    # the cancel kills the task's worker process asynchronously: the next claims remove its
    # folder once it has ended (its pid is in the folder's name, work-<pid>-<hex>)
    assert h.eventually(lambda: _ended(int(made.parent.name.split("-")[1])))
    quick = [BuildRequest(index=i, config={"vec": 4 * (i + 1)}, args=(1024,)) for i in range(2)]
    assert all(r.ok for r in build_all(builder, quick, None))
    assert not made.parent.exists()
    staging = made.parent.parent
    assert h.eventually(lambda: not list(staging.glob("work-*")))  # each task's own, removed


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.timeout(300)
def test_node_loss_mid_run_retries_elsewhere(cluster, tmp_path):
    """A third node joins and is removed while it compiles; the run ends as without it.

    Deterministic: the two first nodes' CPUs are held until a compile has started on the
    third one, which is then removed with that compile in flight (compiles never end there).
    """
    import dataclasses

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from tileauto.scale.ray.cluster import _CoreHold  # an actor that holds its CPUs while it lives

    first_nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")]
    blockers = [
        ray.remote(_CoreHold)
        .options(num_cpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False))
        .remote()
        for n in first_nodes
    ]
    ray.get([b.ready.remote() for b in blockers])
    extra = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    victim = h.node_id(extra)
    space = [{"vec": v} for v in (4, 8, 16, 32)] + [
        {"mode": "slow", "repeat": r, "vec": v} for r in (2, 3) for v in (4, 8)
    ]
    reporter = RecordingReporter()
    # the compile on the new node stalls there: it is in flight when the node is removed
    p = dataclasses.replace(h.problem(space), factory=h.stalling_on(victim))
    session, builder, runner = h.ray_session(p, tmp_path, reporter=reporter)
    removed = []

    def on_start(index, node):
        if not removed and node == victim:
            removed.append(index)
            cluster.remove_node(extra)  # with this compile in flight
            for b in blockers:
                ray.kill(b)

    builder.on_start = on_start
    arrived = []
    forward = builder.build
    builder.build = lambda requests, on_result: forward(
        requests, lambda r: (arrived.append(r.index), on_result(r))
    )
    result = session.run()
    assert removed
    assert builder.resubmitted >= 1
    assert sorted(arrived) == list(range(len(session.view)))  # each build counted once
    trials = [e[1] for e in reporter.events if e[0] == "trial"]
    assert len(trials) == len(session.view)  # each config measured once
    assert all(t.status is TrialStatus.OK for t in result.trials), result.trials
    assert result.config == {"mode": "ok", "repeat": 1, "vec": 16}
    latencies = {(t.config["vec"], t.config["mode"]): t.latency_ms for t in result.trials}
    assert latencies[(16, "ok")] == pytest.approx(1.0)
    assert latencies[(4, "slow")] == pytest.approx(15.0)
    # nothing of the run is left on the surviving nodes: the run actors are gone and every
    # CPU is free (no compile task, no core hold)
    for pid in runner.worker.pids if runner.worker else []:
        assert h.eventually(lambda pid=pid: not psutil.pid_exists(pid)), pid
    assert h.eventually(lambda: ray.available_resources().get("CPU", 0) == 2)


@pytest.mark.timeout(300)
def test_every_node_times_at_once_and_a_node_lost_mid_run_is_replaced(cluster, tmp_path):
    """A run actor per node times configs in parallel; a third node is removed while one of
    them is timing there: the job runs again on another slot, each config is measured once,
    the result is the local one and nothing is left running.

    Deterministic: a slow config's timer never returns on the victim node, and waits until
    that one has started on the other nodes, which happens only if the slots run at once.
    """
    import functools
    import threading

    extra = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    folder = tmp_path / "meet"
    folder.mkdir()
    victim = h.node_id(extra)
    timer = functools.partial(h.node_loss_latency, folder=str(folder), victim=victim)
    space = [{"vec": v} for v in (4, 8, 16, 32)] + [
        {"mode": "slow", "repeat": r, "vec": v} for r in (2, 3) for v in (4, 8)
    ]
    reporter = RecordingReporter()
    session, _, runner = h.ray_session(
        h.problem(space, timeout=150.0, timer=timer), tmp_path / "stage", reporter=reporter
    )

    def remove_when_timing():
        if h.eventually(lambda: (folder / "started").exists(), limit_s=200):
            cluster.remove_node(extra)

    remover = threading.Thread(target=remove_when_timing, daemon=True)
    remover.start()
    result = session.run()
    remover.join(timeout=60)
    assert (folder / "started").exists()
    assert victim in runner.lost_nodes
    assert runner.worker.shares_files  # this machine's nodes read the kernels in place
    trials = [e[1] for e in reporter.events if e[0] == "trial"]
    # each once, the default ({"vec": 8}: the reference) first, then in the space's order
    indices = [t.index for t in trials]
    assert indices == [1, 0, *range(2, len(space))]
    assert all(t.status is TrialStatus.OK for t in result.trials), result.trials
    assert result.config == {"mode": "ok", "repeat": 1, "vec": 16}
    local = h.local_session(h.problem(space), tmp_path / "local").run()
    assert h.comparable(result.trials) == h.comparable(local.trials)
    # every surviving node had a run actor of its own, and none of them is left
    workers = [runner.worker, *(lane.worker for lane in runner._lanes)]
    pids = [pid for w in workers if w is not None for pid in w.pids]
    assert sum(1 for w in workers if w is not None and w.pids) == 3, workers
    for pid in pids:
        assert h.eventually(lambda pid=pid: not psutil.pid_exists(pid)), pid
    assert h.eventually(lambda: ray.available_resources().get("CPU", 0) == 2)


def _no_real_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


# Ray gives a node the machine's GPUs unless told otherwise, and Ray's GPU ids of declared
# GPUs would then name real devices: these tests need a machine without one
no_real_gpu = pytest.mark.skipif(
    not _no_real_gpu(), reason="this machine has a CUDA GPU: Ray's nodes here would see it"
)


def test_a_runner_closed_while_its_actors_start_leaves_no_thread_nor_actor(cluster):
    """Its actors start in the background (a process importing torch and TVM: seconds);
    closing the runner at once stops those starts: no thread of it is left waiting in Ray
    (Ray may be shut down under it: Ray 2.20 then crashed the process) and no actor
    lives on."""
    from tileauto.options import ProfileArgs
    from tileauto.scale.ray import RayRunner

    runner = RayRunner(ProfileArgs(), threads=1, cluster=RayCluster())
    runner.start()  # an actor on each of the 2 nodes, started in the background
    workers = [runner.worker, *(lane.worker for lane in runner._lanes)]
    assert len(workers) == 2 and all(w.starter is not None for w in workers)
    runner.close()
    for worker in workers:
        assert not worker.starter.is_alive()
        assert worker.actor is None
    pids = [pid for w in workers for pid in (*w.pids, *w.watcher_pids)]
    for pid in pids:  # any actor that did start (none, unless the start beat close)
        assert h.eventually(lambda pid=pid: not psutil.pid_exists(pid)), pid

    def run_actors() -> list[int]:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            if any("_RunActor" in part for part in proc.info["cmdline"] or ()):
                found.append(proc.pid)
        return found

    assert h.eventually(lambda: run_actors() == []), run_actors()


@no_real_gpu
def test_a_gpu_target_without_a_gpu_node_is_an_error_before_anything_compiles(cluster, tmp_path):
    from tileauto.scale.ray import RayRunner

    p = h.problem([{"vec": 4}])
    session, builder, _ = h.ray_session(p, tmp_path)
    session.runner = RayRunner(p.profile_args, threads=1, device="cuda", cluster=RayCluster())
    with pytest.raises(NoMatchingNodeError, match="no node of the Ray cluster has a GPU"):
        session.run()
    assert builder.submitted == 0


@no_real_gpu
@pytest.mark.timeout(180)
def test_a_gpu_target_has_a_run_actor_on_each_gpu_of_a_node(cluster):
    """Ray schedules GPUs it is told a node has: a node of 2 (declared, not real) GPUs gets
    two run actors, each holding one; none is left, and the GPUs are free, after a kill."""
    from tileauto.options import ProfileArgs
    from tileauto.scale.ray import RayRunner

    gpus = cluster.add_node(num_cpus=0, num_gpus=2)
    cluster.wait_for_nodes()
    try:
        runner = RayRunner(ProfileArgs(), threads=1, device="cuda", cluster=RayCluster())
        runner.start()
        gpu_node = h.node_id(gpus)
        assert runner.nodes == [gpu_node]  # the only node with a GPU
        assert runner.slots() == [gpu_node, gpu_node]
        workers = [runner.worker, *(lane.worker for lane in runner._lanes)]
        assert len(workers) == 2
        for worker in workers:
            with worker._lock:  # its start began in the background: wait for it
                worker.start()
        assert [w.node for w in workers] == [gpu_node] * 2
        assert len({w.pid for w in workers}) == 2
        # a driver without a GPU takes the first actor's device as the target's
        assert runner._hardware == {"device": {"kind": "cuda", "name": "no-gpu", "cuda": None}}
        assert h.eventually(lambda: ray.available_resources().get("GPU", 0) == 0)
        pids = [pid for w in workers for pid in (*w.pids, *w.watcher_pids)]
        runner.kill()
        for pid in pids:
            assert h.eventually(lambda pid=pid: not psutil.pid_exists(pid)), pid
        assert h.eventually(lambda: ray.available_resources().get("GPU", 0) == 2)
    finally:
        cluster.remove_node(gpus)


def test_executor_option_and_variable_are_checked_where_given(monkeypatch):
    import tileauto
    from tileauto.errors import SettingsError
    from tileauto.settings import Settings

    with pytest.raises(ValueError, match="executor must be None .* got 'dask'"):
        tileauto.ProfileArgs(executor="dask")
    with pytest.raises(SettingsError, match="TILEAUTO_EXECUTOR='dask'"):
        Settings.from_env({"TILEAUTO_EXECUTOR": "dask"})
    assert Settings.from_env({"TILEAUTO_EXECUTOR": "ray"}).executor == "ray"
    assert Settings.from_env({"TILEAUTO_RAY_ADDRESS": "auto"}).ray_address == "auto"


WARM_CHILD = """
import json, sys
sys.path.insert(0, {here!r})
import tileauto, ray_helpers as h
from tune_kernels import scale_jit
result = (
    tileauto.AutoTuner.from_kernel(scale_jit(4096), {space!r})
    .set_profile_args(warmup_iters=1, rep_iters=3, timeout=30.0, timer=h.scripted_latency)
    .run(verbose=False)
)
print(json.dumps({{"hit": result.cache_hit, "key": result.key, "config": result.config,
                  "ray": "ray" in sys.modules and sys.modules["ray"].is_initialized()}}))
"""


@pytest.mark.timeout(300)
def test_executor_ray_through_the_api_matches_local_and_warm_starts_without_a_cluster(
    cluster, tmp_path, monkeypatch
):
    import json
    import os
    import subprocess
    from pathlib import Path

    from tune_kernels import scale_jit

    import tileauto

    space = [{"vec": 4}, {"vec": 16}, {"vec": 8}]

    def tune(executor: str, cache: Path):
        monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(cache))
        return (
            tileauto.AutoTuner.from_kernel(scale_jit(4096), space)
            .set_profile_args(
                warmup_iters=1,
                rep_iters=3,
                timeout=30.0,
                timer=h.scripted_latency,
                executor=executor,
            )  # fmt: skip
            .run(verbose=False)
        )

    on_ray, local = tune("ray", tmp_path / "ray"), tune("local", tmp_path / "local")
    assert h.comparable(on_ray.trials) == h.comparable(local.trials)
    assert on_ray.config == local.config == {"vec": 16}
    # the executor is not part of the problem: one key, the same entry's records
    assert on_ray.key == local.key
    # the same entry, file for file: byte for byte, apart from when it was written and how
    # long things took (the manifest's hashes of the two files that hold durations)
    ray_entry = h.entry_files(tmp_path / "ray" / "autotuner" / on_ray.key)
    local_entry = h.entry_files(tmp_path / "local" / "autotuner" / local.key)
    assert sorted(ray_entry) == sorted(local_entry)
    for name, content in local_entry.items():
        assert ray_entry[name] == content, name
    # a warm start after a Ray run needs no cluster, even with the Ray executor selected
    here = str(Path(__file__).parent)
    env = {
        **os.environ,
        "TILEAUTO_CACHE_DIR": str(tmp_path / "ray"),
        "TILEAUTO_EXECUTOR": "ray",
        "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.run(
        [sys.executable, "-c", WARM_CHILD.format(here=here, space=space)],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    got = json.loads(child.stdout.strip().splitlines()[-1])
    assert got == {"hit": True, "key": on_ray.key, "config": on_ray.config, "ray": False}


LOCAL_CHILD = """
import json, sys
sys.path.insert(0, {here!r})
import ray, tileauto, ray_helpers as h
from tune_kernels import scale_jit
result = (
    tileauto.AutoTuner.from_kernel(scale_jit(4096), [{{"vec": 4}}, {{"vec": 16}}])
    .set_profile_args(warmup_iters=1, rep_iters=3, timeout=30.0, timer=h.scripted_latency)
    .run(verbose=False)
)
print(json.dumps({{"config": result.config, "gcs": ray.get_runtime_context().gcs_address}}))
"""


@pytest.mark.timeout(300)
def test_executor_ray_without_an_address_starts_its_own_ray_beside_a_running_one(cluster, tmp_path):
    """With TILEAUTO_RAY_ADDRESS and RAY_ADDRESS unset, executor ray starts a local Ray of its
    own, even while a cluster runs on this machine (this module's, which Ray finds as it
    would one of `ray start`): Ray alone would join that one, and refuse tileauto's
    settings for a Ray of its own.

    (``auto``, which joins it, is not tested from a second process here: on this module's
    loopback cluster a second driver's objects are out of its workers' reach, and a task
    given one fails with OwnerDiedError, with Ray alone too. A `ray start --head` cluster
    joined with ``auto`` tuned, checked by hand on Ray 2.60.)"""
    import json
    import os
    import subprocess
    from pathlib import Path

    here = str(Path(__file__).parent)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "TILEAUTO_RAY_ADDRESS")}
    env.update(TILEAUTO_EXECUTOR="ray", TILEAUTO_CACHE_DIR=str(tmp_path))
    child = subprocess.run(
        [sys.executable, "-c", LOCAL_CHILD.format(here=here)],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    got = json.loads(child.stdout.strip().splitlines()[-1])
    assert got["config"] == {"vec": 16}
    assert got["gcs"] != cluster.address  # its own, not the running one


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("check", "timeout_s", "said"),
    [
        (h.aborting_check, 60.0, "manual_check_prog crashed the run worker"),
        (h.hanging_check, HANG_S, "manual_check_prog did not return within the tuning's timeout"),
    ],
)
def test_a_check_program_that_kills_a_run_actor_stops_the_tuning_naming_it(
    cluster, tmp_path, monkeypatch, check, timeout_s, said
):
    """As with local workers (test_check_failures.py): the actor's watcher keeps the phase, so
    a check program's crash or hang is not the default config's (which would let every other
    config pass unchecked)."""
    from tune_kernels import scale_jit

    import tileauto

    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path / "cache"))
    tuner = tileauto.AutoTuner.from_kernel(scale_jit(4096), [{"vec": 4}, {"vec": 16}])
    tuner.set_profile_args(
        warmup_iters=1, rep_iters=3, timeout=timeout_s, executor="ray", manual_check_prog=check
    )
    with pytest.raises(TileautoError) as info:
        tuner.run(verbose=False)
    message = str(info.value)
    assert message.startswith(said), message
    assert "{'vec': 8}" in message, message  # the default config, which it ran for


@pytest.mark.timeout(300)
def test_verbose_logs_each_config_compiled_on_the_cluster(cluster, tmp_path, monkeypatch, caplog):
    """``set_compile_args(verbose=True)`` under Ray logs each compile in the tuning's process,
    as with local workers (test_tilelang_options.py); it logged none."""
    import logging

    from tune_kernels import scale_jit

    import tileauto

    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path / "cache"))
    caplog.set_level(logging.WARNING, logger="tileauto.builder")
    (
        tileauto.AutoTuner.from_kernel(scale_jit(4096), [{"vec": 4}, {"vec": 16}])
        .set_compile_args(verbose=True)
        .set_profile_args(warmup_iters=1, rep_iters=3, timeout=60.0, executor="ray")
        .run(verbose=False)
    )
    compiled = [r.getMessage() for r in caplog.records if r.name == "tileauto.builder"]
    for vec in (4, 8, 16):  # the two configs and the default
        assert any(f"config {{'vec': {vec}}} in " in m and m.endswith(": ok") for m in compiled), (
            compiled
        )


@pytest.mark.timeout(300)
def test_a_hook_that_kills_a_run_actor_in_the_re_timing_stops_the_tuning_naming_it(
    cluster, tmp_path, monkeypatch
):
    """As in test_check_failures.py: not the contenders' crash (each would crash alone too)."""
    from tune_kernels import scale_jit

    import tileauto

    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path / "cache"))
    tuner = tileauto.AutoTuner.from_kernel(scale_jit(4096), [{"vec": 4}, {"vec": 16}])
    tuner.set_profile_args(
        warmup_iters=1, rep_iters=3, timeout=60.0, executor="ray", pre_hook=h.aborting_when_retimed
    )
    with pytest.raises(TileautoError) as info:
        tuner.run(verbose=False)
    message = str(info.value)
    assert message.startswith("pre_hook crashed the run worker"), message
    assert "while re-timing configs [" in message, message
