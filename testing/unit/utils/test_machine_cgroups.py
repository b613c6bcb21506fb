"""Container limits: the CPU quota and memory limit of this process's cgroup bound the default
worker counts and the memory checks. Read from fake cgroup folders (never a real cgroup)."""

from __future__ import annotations

import math

import pytest

from tileauto import machine
from tileauto.errors import SettingsError
from tileauto.settings import Settings
from tileauto.workers.procs import Worker

GIB = 2**30


def write(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def fake(tmp_path):
    """``make(proc_lines, files)``: the paths of a fake ``/proc/self/cgroup`` and cgroup root."""

    def make(lines, files):
        root = tmp_path / "cgroup"
        root.mkdir(exist_ok=True)
        write(root, files)
        proc = tmp_path / "proc-self-cgroup"
        proc.write_text("".join(f"{line}\n" for line in lines))
        return proc, root

    return make


def test_cgroup_v2_takes_the_tightest_of_the_folder_and_those_above(fake):
    proc, root = fake(
        ["0::/user.slice/job-1"],
        {
            "cgroup.controllers": "cpu memory",
            "user.slice/cpu.max": "150000 100000",
            "user.slice/memory.max": "max",
            "user.slice/job-1/cpu.max": "max 100000",
            "user.slice/job-1/memory.max": str(4 * GIB),
            "user.slice/job-1/memory.current": str(GIB),
        },
    )
    limits = machine.read_container_limits(proc, root)
    assert limits.cpus == 1.5 and limits.memory_bytes == 4 * GIB
    assert limits.memory_file == root / "user.slice/job-1/memory.current"


def test_cgroup_v1_quota_and_limit_and_a_namespaced_view(fake):
    # docker without a cgroup namespace: /proc names /docker/<id>, the mount shows its own folder
    proc, root = fake(
        ["12:memory:/docker/abc", "4:cpu,cpuacct:/docker/abc", "1:name=systemd:/docker/abc"],
        {
            "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "200000",
            "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000",
            "cpu,cpuacct/cpu.cfs_quota_us": "-1",
            "cpu,cpuacct/cpu.cfs_period_us": "100000",
            "memory/memory.limit_in_bytes": str(2 * GIB),
            "memory/memory.usage_in_bytes": str(GIB // 2),
        },
    )
    limits = machine.read_container_limits(proc, root)
    assert limits.cpus == 2.0 and limits.memory_bytes == 2 * GIB
    assert limits.memory_file == root / "memory/memory.usage_in_bytes"


@pytest.mark.parametrize(
    "files",
    [
        {},  # nothing mounted
        {  # v1 with no limits: -1, and "no limit" written as a number near 2**63
            "cpu/cpu.cfs_quota_us": "-1",
            "cpu/cpu.cfs_period_us": "100000",
            "memory/memory.limit_in_bytes": "9223372036854771712",
            "unified/cgroup.procs": "",
        },
        {"cgroup.controllers": "", "cpu.max": "max 100000", "memory.max": "max"},
    ],
)
def test_no_limit_is_none(fake, files):
    proc, root = fake(["4:memory:/", "2:cpu:/", "0::/"], files)
    assert machine.read_container_limits(proc, root) == machine.ContainerLimits(None, None)
    assert machine.read_container_limits(root / "missing", root) == machine.ContainerLimits(
        None, None
    )


@pytest.fixture
def container(fake, monkeypatch):
    """This process seen in a container of half a CPU and 64 MiB, 16 MiB of it used."""
    proc, root = fake(
        ["0::/box"],
        {
            "cgroup.controllers": "cpu memory",
            "box/cpu.max": "50000 100000",
            "box/memory.max": str(64 * 2**20),
            "box/memory.current": str(16 * 2**20),
        },
    )
    monkeypatch.setattr(machine, "PROC_CGROUP", proc)
    monkeypatch.setattr(machine, "CGROUP_ROOT", root)


def test_worker_counts_and_thread_checks_use_the_cpu_quota(container):
    assert machine.available_cpus() == 1  # half a CPU, rounded up
    assert Settings.from_env().compile_workers() == 1
    said = machine.too_many_threads(2)
    assert said is not None and "the 1 CPUs this process may use" in said
    assert "cgroup's CPU quota of 0.5" in said


def test_memory_checks_use_the_container_limit(container):
    assert machine.memory_bytes() == 64 * 2**20
    assert machine.available_memory_bytes() <= 48 * 2**20
    assert machine.run_memory_limit_bytes(32) == 32 * 2**20
    with pytest.raises(SettingsError, match=r"more than the 64 MiB of memory of this container"):
        machine.run_memory_limit_bytes(65)
    worker = Worker("cgroup-memory")  # never started: its default limit only
    assert worker.memory_limit_bytes == math.floor(machine.available_memory_bytes() * 0.9)


def test_a_small_memory_limit_is_said_in_mib_not_as_zero_gib():
    assert machine.size_text(2**20) == "1.0 MiB"
    assert machine.size_text(52 * 2**20) == "52.0 MiB"
    assert machine.size_text(3 * 2**30) == "3.0 GiB"
