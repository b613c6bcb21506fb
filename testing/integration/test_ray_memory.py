"""The memory limit of a config run on Ray (issue 11): the run actor's watcher, on its node,
kills it past ``TILEAUTO_RUN_MEMORY_LIMIT_MB``, the trial says out of memory, a new actor runs
the next config, as a local run worker would.

One loopback cluster (a head without CPUs and one 1-CPU node) serves the module.
"""

from __future__ import annotations

import psutil
import pytest

ray = pytest.importorskip("ray")

import ray_helpers as h  # noqa: E402

from tileauto import TrialStatus  # noqa: E402
from tileauto.options import ProfileArgs  # noqa: E402
from tileauto.scale.ray import RayBuilder, RayCluster, RayRunner  # noqa: E402
from tileauto.tune import defaults  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with h.local_cluster(nodes=1, cpus=1) as c:
        yield c


def gone(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(pid) for pid in pids)


@pytest.mark.timeout(120)
def test_a_config_exhausting_memory_in_the_actor_is_reported_and_the_actor_replaced(
    cluster, tmp_path, monkeypatch
):
    monkeypatch.setenv("TILEAUTO_RUN_MEMORY_LIMIT_MB", "1500")
    p = h.problem([{"vec": 4}, {"mode": "hog"}, {"vec": 16}], timeout=60.0)
    assert p.settings.run_memory_limit_mb == 1500
    rc = RayCluster()
    builder = RayBuilder(p.factory, p.compile_args, staging_dir=tmp_path, cluster=rc)
    runner = RayRunner(
        p.profile_args,
        threads=1,
        memory_limit_mb=p.settings.run_memory_limit_mb,
        device=p.device_type,
        timer=p.timer,
        cluster=rc,
    )
    result = defaults.session(p, builder=builder, runner=runner).run()
    assert [t.status for t in result.trials] == [
        TrialStatus.OK,
        TrialStatus.OUT_OF_MEMORY,
        TrialStatus.OK,
    ], result.trials
    error = result.trials[1].error
    assert "out of memory: the Ray run actor took more than 1.5 GiB and was killed" in error
    assert result.config == {"mode": "ok", "vec": 16}
    assert result.latency == pytest.approx(1.0)
    # a new actor (and watcher) after the one killed; none of them is left after the session
    worker = runner.worker
    assert worker is not None
    assert len(set(worker.pids)) == 2, worker.pids
    assert len(set(worker.watcher_pids)) == 2, worker.watcher_pids
    assert h.eventually(lambda: gone(worker.pids + worker.watcher_pids))


@pytest.mark.timeout(120)
def test_the_watcher_imports_no_torch_and_goes_with_its_actor(cluster):
    runner = RayRunner(ProfileArgs(), threads=1, cluster=RayCluster())
    worker = runner.make_worker("cpu", 1, runner.memory_limit_mb)
    worker.start()
    try:
        # no limit set: 90% of what the node had available when the actor started
        assert 0 < worker.memory_limit_bytes < psutil.virtual_memory().total
        (watcher,) = worker.watcher_pids
        mapped = [m.path for m in psutil.Process(watcher).memory_maps()]
        assert not [path for path in mapped if "torch" in path or "tvm" in path], mapped
        assert any("torch" in m.path for m in psutil.Process(worker.pid).memory_maps())
    finally:
        _stop(runner, worker)


def _stop(runner: RayRunner, worker) -> None:
    """Kill ``worker`` and the runner, and check that none of their actors is left."""
    worker.kill()
    # worker.start() started the runner too, and so its own slot's actor, in a thread that
    # would otherwise go on in Ray after this module shut it down (and join it again)
    runner.kill()
    own = runner.worker
    assert h.eventually(
        lambda: gone(worker.pids + worker.watcher_pids + own.pids + own.watcher_pids)
    )


@pytest.mark.timeout(120)
def test_a_memory_limit_above_the_nodes_memory_is_an_error_naming_the_node(cluster):
    """Checked on the node, against its memory (a node's differs from the driver's): by the
    run actor as it starts (the runner's own check at its start is the next test's)."""
    from tileauto.errors import SettingsError

    total_mb = psutil.virtual_memory().total // 2**20  # the loopback nodes are this machine
    runner = RayRunner(ProfileArgs(), threads=1, cluster=RayCluster())
    worker = runner.make_worker("cpu", 1, 4 * total_mb)
    try:
        with pytest.raises(SettingsError, match=r"more than the \d+ MiB of memory of the Ray node"):
            worker.start()
    finally:
        _stop(runner, worker)


@pytest.mark.timeout(120)
def test_a_memory_limit_above_the_nodes_memory_is_refused_before_any_compile(cluster):
    """The runner's start (before the session compiles anything) checks each matching node's
    memory, from the probe that matched it. Before, the check waited for the run actor, whose
    first job comes after every config of the first batch compiled."""
    from tileauto.errors import SettingsError

    total_mb = psutil.virtual_memory().total // 2**20
    runner = RayRunner(ProfileArgs(), threads=1, memory_limit_mb=4 * total_mb, cluster=RayCluster())
    try:
        with pytest.raises(SettingsError, match=r"more than the \d+ MiB of memory of the Ray node"):
            runner.start()
        assert runner.worker is None  # no actor was started
    finally:
        runner.kill()


@pytest.mark.timeout(120)
def test_the_run_actors_kernels_go_to_a_private_folder_the_next_actor_clears(cluster):
    """Before, every user's actors wrote into one /tmp/tileauto-ray made by whoever came
    first (mode 755: another user's actors could not start; 777: their kernels could be
    swapped)."""
    import os
    import stat
    from pathlib import Path

    runner = RayRunner(ProfileArgs(), threads=1, cluster=RayCluster())
    worker = runner.make_worker("cpu", 1, runner.memory_limit_mb)
    try:
        worker.start()
        first = Path(worker.scratch)
        assert first.is_dir() and first.name.startswith("run-")
        assert (first.parent.name, first.parent.parent.name) == ("ray", f"tileauto-{os.getuid()}")
        assert stat.S_IMODE(first.parent.stat().st_mode) == 0o700
        killed = list(worker.pids)
        worker.kill()
        assert h.eventually(lambda: gone(killed))
        worker.start()  # its claim ended with the killed actor: the next one removes it
        assert not first.exists() and Path(worker.scratch).is_dir()
    finally:
        _stop(runner, worker)
