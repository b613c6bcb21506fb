"""CPU seconds by process during a block: what ``bench/ray_scale.py`` prints as where a
tuning's CPU goes. Run as a script (``python _cpu_by_process.py PID``), it is the sampler."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil


class CpuByProcess:
    """CPU seconds (user + system) of this process and of every process under it while the
    block runs. A sampler process (this file run with the pid: a thread here would make
    the local stages start their workers from the forkserver instead of forking them) reads
    them every 0.2 s; a process that ends loses at most its last interval. ``runs`` and
    ``watchers`` name the run worker / actor and memory watcher pids, which the caller learns
    from its stages (see :meth:`classify`)."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.runs: set[int] = set()
        self.watchers: set[int] = set()
        self.seen: dict[int, dict] = {}

    def __enter__(self) -> CpuByProcess:
        self._sampler = subprocess.Popen(
            [sys.executable, __file__, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._sampler.stdout is not None
        self._sampler.stdout.readline()  # its first sample is taken: the baseline
        t = self.me.cpu_times()
        self._mine = t.user + t.system
        return self

    def __exit__(self, *exc) -> None:
        t = self.me.cpu_times()
        self.driver = t.user + t.system - self._mine
        out, _ = self._sampler.communicate("stop\n")
        self.seen = {int(k): v for k, v in json.loads(out).items()}

    def classify(self) -> dict[str, float]:
        """CPU seconds by what each process was for."""
        out: dict[str, float] = {"driver (this process)": self.driver}
        mine = " ".join(self.me.cmdline())
        parents = {v["ppid"] for v in self.seen.values()}
        for pid, v in self.seen.items():
            text = " ".join(v["titles"])
            if pid in self.runs:
                kind = "run worker / run actor"
            elif pid in self.watchers:
                kind = "memory watcher (Ray)"
            elif "worker_entry" in text:
                kind = "forkserver" if pid in parents else "compile workers"
            elif text == mine:
                kind = "compile workers"  # forked from this process
            elif "_compile_task" in text or "_warm_task" in text:
                kind = "compile workers"
            elif "ray::" in text and "Agent" not in text:
                kind = "Ray workers that compiled nothing"
            else:
                kind = "Ray's own processes (raylet, GCS, agents)"
            out[kind] = out.get(kind, 0.0) + v["cpu"] - v["base"]
        return out


def sample(pid: int, every: float = 0.2) -> None:
    """The sampler of :class:`CpuByProcess`: until a line arrives on stdin, the CPU time of
    every process under ``pid`` (but this one); then print them as JSON."""
    import selectors

    root, me = psutil.Process(pid), os.getpid()
    seen: dict[int, dict] = {}

    def take(first: bool) -> None:
        for proc in root.children(recursive=True):
            if proc.pid == me:
                continue
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    title = " ".join(proc.cmdline())[:160]
                    ppid = proc.ppid()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            cpu = times.user + times.system
            entry = seen.setdefault(
                proc.pid, {"base": cpu if first else 0.0, "titles": [], "ppid": ppid}
            )
            entry["cpu"] = cpu
            if title not in entry["titles"]:
                entry["titles"].append(title)

    take(first=True)  # processes already there count from now
    print("ready", flush=True)
    wake = selectors.DefaultSelector()
    wake.register(sys.stdin, selectors.EVENT_READ)
    while not wake.select(timeout=every):
        take(first=False)
    take(first=False)
    print(json.dumps(seen))


if __name__ == "__main__":
    sample(int(sys.argv[1]))
