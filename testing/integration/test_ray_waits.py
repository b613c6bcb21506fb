"""What a Ray tuning waits for, and that each wait ends: a fresh worker's start-up (not the
compile's timeout), the CPUs of a timing node or of the cluster that other work holds, the
arguments and addresses it is given. One loopback cluster (a head without CPUs and one node of
2 CPUs) serves the module; the "other work" is an actor of the test holding CPUs.
"""

from __future__ import annotations

import threading
import uuid
import warnings
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

import ray_helpers as h  # noqa: E402

from tileauto.build.builder import BuildRequest, BuildStatus  # noqa: E402
from tileauto.build.job import build_all  # noqa: E402
from tileauto.scale.ray import RayBuilder, RayCluster  # noqa: E402
from tileauto.scale.ray import build as ray_build  # noqa: E402
from tileauto.scale.ray import cluster as ray_cluster  # noqa: E402

GUARD_S = 120.0  # a wait that never ends fails the test after this, instead of hanging it

# a factory whose module, imported in a Ray worker, blocks until the test writes GATE: the
# start-up of a fresh worker (which imports torch, TVM and the user's modules) made long
GATED = """\
import time
from pathlib import Path

from ray._private.worker import WORKER_MODE, global_worker

if global_worker.mode == WORKER_MODE:  # in a Ray worker, not in the test's driver
    deadline = time.monotonic() + 300  # a guard: never a hang
    while not Path({gate!r}).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the test never opened the gate")
        time.sleep(0.05)


def factory(n, vec=8):
    from tune_kernels import scale

    return scale(n, vec)
"""


@pytest.fixture(scope="module")
def cluster():
    with h.local_cluster(nodes=1, cpus=2) as c:
        yield c


def tenant(cpus: float):
    """Another user's actor: it holds its CPUs while it lives."""

    class Tenant:  # defined here: sent by value (the workers cannot import this module)
        def ready(self) -> bool:
            return True

    actor = ray.remote(Tenant).options(num_cpus=cpus).remote()
    ray.get(actor.ready.remote(), timeout=GUARD_S)
    return actor


def compute_node() -> str:
    (node,) = [n for n, r in RayCluster().nodes().items() if r.get("CPU")]
    return node


def in_thread(fn):
    """``fn()`` in a thread joined for at most GUARD_S: (finished, value or exception)."""
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD_S)
    return (not thread.is_alive()), (out[0] if out else None)


def gated_factory(folder: Path, monkeypatch) -> tuple:
    """The factory of a new module in ``folder`` (on sys.path) and its gate file."""
    import importlib

    name = f"gated_{uuid.uuid4().hex[:8]}"  # new: no Ray worker imported it yet
    gate = folder / f"{name}.gate"
    (folder / f"{name}.py").write_text(GATED.format(gate=str(gate)))
    monkeypatch.syspath_prepend(str(folder))
    return importlib.import_module(name).factory, gate


@pytest.mark.parametrize("num_cpus", [0, -1, 0.0, float("nan"), float("inf"), "1", None, True])
def test_ray_builder_refuses_num_cpus_that_is_not_a_positive_number(num_cpus, tmp_path):
    """0 made the compile slots 2e9 and start() submit that many warm-ups, forever."""
    from tune_kernels import scale, scale_jit

    with pytest.raises(ValueError, match=r"num_cpus"):
        RayBuilder(
            scale,
            scale_jit.compile_args,
            staging_dir=tmp_path,
            cluster=RayCluster(),
            **{"num_cpus": num_cpus},
        )


@pytest.mark.timeout(240)
def test_a_fresh_workers_start_up_does_not_count_in_the_compile_timeout(
    cluster, tmp_path, monkeypatch
):
    """The factory's module takes longer to import on the node than the compile timeout
    (its gate opens only then); the compile itself is quick: the config compiles. Before,
    the timeout counted from the task's start and the config was a compile_timeout."""
    from tune_kernels import scale_jit

    factory, gate = gated_factory(tmp_path, monkeypatch)
    timeout_s = 8.0
    builder = RayBuilder(
        factory, scale_jit.compile_args, staging_dir=tmp_path / "stage", timeout_s=timeout_s
    )
    # the gate opens well after the compile's timeout, counted from the task's start
    builder.on_start = lambda index, node: threading.Timer(
        timeout_s + 3, gate.write_text, ("open",)
    ).start()
    request = BuildRequest(index=0, config={"vec": 4}, args=(1024,))
    (result,) = build_all(builder, [request])
    builder.close()
    assert result.ok, result  # before: compile_timeout, the gate still closed
    assert gate.exists()  # the factory loaded only after the timeout had passed


@pytest.mark.timeout(240)
def test_a_start_up_that_never_ends_is_a_compile_timeout_that_says_so(
    cluster, tmp_path, monkeypatch
):
    """Loading the factory has its own bound, max(timeout_s, LOAD_TIMEOUT_S), and message."""
    from tune_kernels import scale_jit

    factory, _gate = gated_factory(tmp_path, monkeypatch)  # never opened
    monkeypatch.setattr(ray_build, "LOAD_TIMEOUT_S", 4.0, raising=False)
    builder = RayBuilder(
        factory, scale_jit.compile_args, staging_dir=tmp_path / "stage", timeout_s=2.0
    )
    request = BuildRequest(index=0, config={"vec": 4}, args=(1024,))
    (result,) = build_all(builder, [request])
    builder.close()
    assert result.status is BuildStatus.TIMEOUT, result
    assert "did not load the factory" in result.error and "4 s" in result.error, result.error
    assert h.eventually(lambda: ray.available_resources().get("CPU", 0) == 2)


@pytest.mark.timeout(240)
def test_timing_beside_another_tenant_holding_a_cpu_ends_with_a_warning(cluster, monkeypatch):
    """hold_cores waits a bounded time for the node's CPUs, then goes on and says who held
    how many; the hold takes the CPUs once the tenant is gone. Before, it waited forever."""
    monkeypatch.setattr(ray_cluster, "HOLD_WAIT_S", 2.0, raising=False)
    node, rc = compute_node(), RayCluster()
    other = tenant(1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ended, error = in_thread(lambda: rc.hold_cores(node))
            assert ended, f"hold_cores still waits after {GUARD_S:g} s"
            assert error is None, error
            rc.hold_cores(node)  # held (asked for) already: no second wait, no second warning
        messages = [str(w.message) for w in caught if "without holding its CPUs" in str(w.message)]
        assert len(messages) == 1, [str(w.message) for w in caught]
        assert "held 1 of its 2 CPUs for 2 s" in messages[0], messages[0]
    finally:
        ray.kill(other)
    # the tenant gone, the hold takes every CPU of the node
    assert h.eventually(lambda: ray.available_resources().get("CPU", 0) == 0)
    rc.release_cores()
    assert h.eventually(lambda: ray.available_resources().get("CPU", 0) == 2)


@pytest.mark.timeout(240)
def test_compiles_on_a_cluster_without_a_free_cpu_warn_then_fail(cluster, tmp_path, monkeypatch):
    """Another tenant holds every CPU: the build warns once what it waits for, then fails
    naming the cause. Before, it waited forever, silently."""
    from tune_kernels import scale, scale_jit

    monkeypatch.setattr(ray_build, "PENDING_WARN_S", 1.0, raising=False)
    monkeypatch.setattr(ray_build, "PENDING_LIMIT_S", 4.0, raising=False)
    builder = RayBuilder(scale, scale_jit.compile_args, staging_dir=tmp_path, timeout_s=30.0)
    assert builder.workers == 2  # read before the tenant takes the CPUs: two slots wait
    requests = [
        BuildRequest(index=i, config={"vec": v}, args=(1024,)) for i, v in enumerate((4, 8))
    ]
    other = tenant(2)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ended, error = in_thread(lambda: build_all(builder, requests))
            builder.close()
        assert ended, f"the build still waits after {GUARD_S:g} s"
        assert isinstance(error, ray_build.ClusterBusyError), error
        assert "waiting for CPUs" in str(error) and "2 CPUs, 0 of them free" in str(error)
        warned = [str(w.message) for w in caught if "waiting for CPUs" in str(w.message)]
        assert len(warned) == 1, warned
        assert "pending" in warned[0] and "resource 'CPU'" in warned[0], warned[0]
    finally:
        ray.kill(other)
    assert h.eventually(lambda: ray.available_resources().get("CPU", 0) == 2)


def test_an_address_not_used_because_ray_is_joined_already_is_warned_of(cluster):
    """Ray joins one cluster per process: an address other than the one joined is not used,
    and says so (once), naming both. Before, it was silently ignored."""
    joined = ray.get_runtime_context().gcs_address
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RayCluster(joined).connect()  # the one joined: nothing to say
        RayCluster("127.0.0.1:1", source="TILEAUTO_RAY_ADDRESS").connect()
        RayCluster("127.0.0.1:1", source="TILEAUTO_RAY_ADDRESS").connect()  # once
    messages = [str(w.message) for w in caught if "is not used" in str(w.message)]
    assert len(messages) == 1, [str(w.message) for w in caught]
    assert "TILEAUTO_RAY_ADDRESS='127.0.0.1:1'" in messages[0] and joined in messages[0]


@pytest.mark.parametrize(
    ("env", "workers"),
    [
        ({}, 2),  # round(2 CPUs * 0.9)
        ({"TILEAUTO_AUTO_TUNING_MAX_CPU_COUNT": "1"}, 1),
        ({"TILEAUTO_AUTO_TUNING_CPU_COUNTS": "1"}, 1),
        ({"TILEAUTO_AUTO_TUNING_CPU_UTILITIES": "0.4"}, 1),
    ],
)
def test_the_compile_worker_settings_size_the_clusters_compiles(cluster, tmp_path, env, workers):
    """Before, they were ignored on Ray: every CPU of the cluster compiled whatever they said."""
    from tune_kernels import scale, scale_jit

    from tileauto.settings import Settings

    builder = RayBuilder(
        scale,
        scale_jit.compile_args,
        staging_dir=tmp_path,
        cluster=RayCluster(),
        settings=Settings.from_env(env),
    )
    assert builder.workers == workers


def test_more_compile_workers_than_the_clusters_cpus_is_refused(cluster, tmp_path):
    """Before, a count refused locally was taken on Ray (and meant nothing)."""
    from tune_kernels import scale, scale_jit

    from tileauto.errors import SettingsError
    from tileauto.settings import Settings

    for num_cpus, where in [(1, "2 CPUs of the Ray cluster"), (2, "1 compile slots")]:
        builder = RayBuilder(
            scale,
            scale_jit.compile_args,
            staging_dir=tmp_path,
            cluster=RayCluster(),
            num_cpus=num_cpus,
            settings=Settings.from_env({"TILEAUTO_AUTO_TUNING_CPU_COUNTS": "3"}),
        )
        with pytest.raises(SettingsError, match=rf"CPU_COUNTS=3: .* than the {where}"):
            _ = builder.workers
