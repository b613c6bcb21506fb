"""Timing on Ray: :class:`RayRunner`, the run stage of ``executor="ray"``, and its lanes.

A :class:`tileauto.run.runner.Runner` whose worker is a run actor; each other matching slot
(a CPU node, or a GPU) is a lane with its own actor, sharing the runner's sessions.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar, cast

from tileauto._logging import get_logger
from tileauto.artifact import KernelArtifact
from tileauto.machine import run_memory_limit_bytes
from tileauto.options import ProfileArgs
from tileauto.records import RunOutcome
from tileauto.run.runner import Runner
from tileauto.scale.ray.actor import RayWorker, start_quietly
from tileauto.scale.ray.cluster import START_POLL_S, NodeLost, RayCluster
from tileauto.scale.ray.node import local_hardware
from tileauto.scale.ray.nodes import NoMatchingNodeError, matching_nodes
from tileauto.utils.threads import background_thread

log = get_logger("ray")
T = TypeVar("T")


class RayRunner(Runner):
    """Checks and times configs in a Ray actor (a :class:`~tileauto.tune.stages.RunStage`).

    A :class:`tileauto.run.runner.Runner` (the same inputs, reference, replacement after a crash
    or a timeout) whose worker is a :class:`RayWorker`. Args as ``Runner``'s, plus:

    Args:
        cluster: the cluster (default: ``RayCluster()``).
        reserve_cores: on a CPU target, hold every core of the timing node while timing.

    Attributes:
        nodes: the matching nodes (found by :meth:`start`), the first one used first.
        lost_nodes: nodes lost during the run (their jobs were run again elsewhere).
    """

    def __init__(
        self,
        profile: ProfileArgs,
        *,
        threads: int,
        memory_limit_mb: int = -1,
        device: str = "cpu",
        captured: Sequence[Any] | None = None,
        timer: Any = None,
        cluster: RayCluster | None = None,
        reserve_cores: bool = True,
    ) -> None:
        super().__init__(
            profile,
            threads=threads,
            memory_limit_mb=memory_limit_mb,
            device=device,
            captured=captured,
            timer=timer,
        )
        self.cluster = cluster if cluster is not None else RayCluster()
        self.reserve_cores = reserve_cores
        self.nodes: list[str] = []
        self.lost_nodes: list[str] = []
        self.unfit: dict[str, str] = {}  # node -> why the tuning's functions do not load there
        self._hardware: dict[str, Any] | None = None
        self._started = False
        self._lanes: list[_Lane] = []  # run actors on the other slots (see run_many)

    # -- placement -------------------------------------------------------------------------------
    def start(self) -> None:
        """Join the cluster and find the nodes whose hardware matches (before any compile).

        Raises:
            NoMatchingNodeError: no node matches.
            SettingsError: ``TILEAUTO_RUN_MEMORY_LIMIT_MB`` is more than a matching node's
                memory.
        """
        self.cluster.connect()
        if self.device == "cpu":
            self.nodes = matching_nodes(self.cluster, "cpu")
            self._hardware = local_hardware("cpu")
            for node in self.nodes:  # before any compile: each run actor checks its node too
                memory = self.cluster.probed.get(node, {}).get("memory")
                if memory is not None:
                    run_memory_limit_bytes(self.memory_limit_mb, memory, f"the Ray node {node}")
        else:
            gpus = [n for n, r in self.cluster.nodes().items() if r.get("GPU", 0.0) >= 1]
            if not gpus:
                raise NoMatchingNodeError("no node of the Ray cluster has a GPU")
            self.nodes = gpus
        self._started = True
        if self.worker is None:
            # the actor starts (importing torch and TVM) while the configs compile; a job
            # waits for it (the worker's lock)
            worker = self.make_worker(self.device, self.threads, self.memory_limit_mb)
            self.worker = worker  # type: ignore[assignment]  # stands in for a Worker
            worker.starter = background_thread(start_quietly, worker, name="tileauto-ray-run-start")
            # and one per other slot (the first slot is this runner's: see next_node)
            self._lanes_for(self.slots()[1:])

    def next_node(self) -> str:
        """The node for a new run actor: the first matching one still alive."""
        if not self._started:
            self.start()
        self.cluster.check_own_node(ask_gcs=True)
        alive = self.cluster.nodes()
        for node in self.nodes:
            if node in alive:
                return node
        if self.unfit:
            raise NoMatchingNodeError(
                f"no node matching the target is left to time on: on {len(self.unfit)} of "
                f"them, {next(iter(self.unfit.values()))}"
            )
        raise NoMatchingNodeError(
            f"every node matching the target was lost ({len(self.lost_nodes)} lost)"
        )

    def hardware_ok(self, node: str, hardware: dict[str, Any]) -> bool:
        """A new actor's hardware: the target's (GPU: the first actor's, when the driver has
        no GPU of that kind); a node that does not match is not used again."""
        if self._hardware is None:
            try:
                here = local_hardware(self.device)
            except Exception:  # noqa: BLE001 - no GPU on the driver
                here = None
            usable = here is not None and here.get("device", {}).get("name") != "no-gpu"
            self._hardware = here if usable else hardware
        if hardware == self._hardware:
            return True
        log.info("node %s left out: hardware %s, not %s", node[:12], hardware, self._hardware)
        self.nodes = [n for n in self.nodes if n != node]
        return False

    def loads_on(self, node: str, why_not: str | None) -> bool:
        """A new actor's answer to loading the tuning's functions (None: loaded); a node
        where they do not load (a module it lacks) is not used again."""
        if why_not is None:
            return True
        if node not in self.unfit:
            self.unfit[node] = why_not
            log.warning("Ray node %s left out of the timings: %s", node[:12], why_not)
        self.nodes = [n for n in self.nodes if n != node]
        return False

    def lost(self, node: str) -> None:
        if node not in self.lost_nodes:
            self.lost_nodes.append(node)
        self.nodes = [n for n in self.nodes if n != node]

    def make_worker(  # type: ignore[override]
        self, device: str, threads: int, memory_limit_mb: int = -1, *, fork_ok: bool = False
    ) -> RayWorker:
        return RayWorker(self, device, threads, memory_limit_mb)

    # -- node loss: the same job again, elsewhere -------------------------------------------------
    def setup(self, key: str | None = None) -> Any:
        try:
            return super().setup(key)
        except NodeLost:
            self._setup_errors.pop(self.first if key is None else key, None)
            self._ready.clear()
            raise

    def run(
        self,
        artifact: KernelArtifact,
        config: dict,
        *,
        is_reference: bool = False,
        time_it: bool = True,
    ) -> RunOutcome:
        for _ in range(self.cluster.node_retries):
            try:
                return super().run(artifact, config, is_reference=is_reference, time_it=time_it)
            except NodeLost as exc:
                log.info("%s; running %s again elsewhere", exc, config)
                self._ready.clear()
        return super().run(artifact, config, is_reference=is_reference, time_it=time_it)

    def retime(
        self, items: Sequence[tuple[KernelArtifact, dict]], rounds: int
    ) -> list[tuple[float, ...]] | RunOutcome | None:
        for _ in range(self.cluster.node_retries + 1):
            lost = len(self.lost_nodes)
            got = super().retime(items, rounds)
            if got is not None or len(self.lost_nodes) == lost:
                return got
            self._ready.clear()
        return None

    def time_reference(self, warmup: int = 3, rep: int = 10) -> float | None:
        for _ in range(self.cluster.node_retries + 1):
            lost = len(self.lost_nodes)
            got = super().time_reference(warmup, rep)
            if got is not None or len(self.lost_nodes) == lost:
                return got
            self._ready.clear()
        return None

    # -- several slots: configs run in parallel ---------------------------------------------------
    def slots(self) -> list[str]:
        """A node per run actor that can time at once: each matching CPU node once (its
        actor holds all its cores), each GPU of a matching node once."""
        if not self._started:
            self.start()
        alive = self.cluster.nodes()
        if self.device == "cpu":
            return [n for n in self.nodes if n in alive]
        return [n for n in self.nodes if n in alive for _ in range(int(alive[n].get("GPU", 0)))]

    def run_many(
        self, items: Sequence[tuple[KernelArtifact, dict]]
    ) -> Iterator[tuple[int, RunOutcome]]:
        """Check and time ``items`` on every slot at once; yields ``(position, outcome)`` as
        each ends (on the caller's thread).

        This runner's own actor is one slot; a run actor for each other slot is started on
        first use and kept (set up with the same inputs and the reference made by the
        default config). A job whose node is lost goes back to the queue for another slot,
        and that slot's actor stops taking jobs.
        """
        slots = self.slots()
        mine = self.worker.node if isinstance(self.worker, RayWorker) else None
        if mine is not None and mine in slots:
            slots.remove(mine)
        else:
            slots = slots[1:]
        if not slots:  # one slot: this runner's actor, on the caller's thread
            for k, (artifact, config) in enumerate(items):
                yield k, self.run(artifact, config)
            return
        lanes: list[RayRunner] = [self, *self._lanes_for(slots)]
        todo = list(range(len(items)))
        lock = threading.Lock()
        done: queue.Queue[tuple[int, RunOutcome] | BaseException | None] = queue.Queue()

        def take() -> int | None:
            with lock:
                return todo.pop(0) if todo else None

        def work(lane: RayRunner) -> None:
            try:
                while (k := take()) is not None:
                    artifact, config = items[k]
                    try:
                        done.put((k, lane.run(artifact, config)))
                    except NodeLost:
                        with lock:
                            todo.insert(0, k)  # not the config's fault: another slot runs it
                        return
            except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread
                done.put(exc)
            finally:
                done.put(None)

        for i, lane in enumerate(lanes):
            background_thread(work, lane, name=f"tileauto-ray-run-{i}")
        running, left = len(lanes), len(items)
        while left:
            try:
                got = done.get(timeout=0.1)  # wakes for Ctrl-C
            except queue.Empty:
                continue
            if got is None:
                running -= 1
                if running == 0 and todo:  # every extra slot lost its node: run the rest here
                    while (j := take()) is not None:
                        left -= 1
                        yield j, self.run(*items[j])
                continue
            if isinstance(got, BaseException):
                self.kill()
                raise got
            left -= 1
            yield got

    def _lanes_for(self, slots: list[str]) -> list[_Lane]:
        """A lane per slot (a node, once per GPU on GPU targets): the ones made already for
        that node, then new ones (their actors start in the background)."""
        free = list(self._lanes)
        chosen: list[_Lane] = []
        for node in slots:
            lane = next((x for x in free if x.node == node), None)
            if lane is None:
                lane = _Lane(self, node)
                self._lanes.append(lane)
                worker = cast(RayWorker, lane.worker)
                worker.starter = background_thread(
                    start_quietly, worker, name="tileauto-ray-run-start"
                )
            else:
                free.remove(lane)
            chosen.append(lane)
        return chosen

    def kill(self) -> None:
        """Kill every slot's run actor, and wait for the starts still in progress to give up:
        once closed, this runner has no thread left in Ray."""
        workers = [lane.worker for lane in self._lanes] + [self.worker]
        for lane in self._lanes:
            lane.kill_worker()
        super().kill()
        self.cluster.release_cores()
        for worker in workers:
            starter = getattr(worker, "starter", None)
            if starter is not None and starter is not threading.current_thread():
                starter.join(timeout=START_POLL_S * 25)


class _OfMain(Generic[T]):
    """An attribute of a lane that is its main runner's (read and written there, once the
    lane is bound to it: the defaults ``Runner.__init__`` writes before are not the main's)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, lane: Any, owner: type | None = None) -> T:
        if lane is None:  # looked up on the class
            return cast(T, self)
        return cast(T, getattr(lane.main, self.name))

    def __set__(self, lane: Any, value: T) -> None:
        if "main" in vars(lane):
            setattr(lane.main, self.name, value)


class _Lane(RayRunner):
    """Another slot of a :class:`RayRunner`: its own run actor, on its own node, sharing the
    runner's sessions (inputs, the reference), placement and faults."""

    def __init__(self, main: RayRunner, node: str) -> None:
        # a runner of its own for what belongs to one actor (the worker, the sessions it set
        # up); the sessions themselves are the main runner's (the descriptors below)
        Runner.__init__(
            self,
            main.profile,
            threads=main.threads,
            memory_limit_mb=main.memory_limit_mb,
            device=main.device,
            captured=main.captured,
            timer=main.timer,
        )
        self.main, self.node = main, node
        self.cluster, self.reserve_cores = main.cluster, main.reserve_cores
        self.nodes, self.lost_nodes, self.unfit = [node], [], {}
        self._hardware, self._started, self._lanes = None, True, []
        self.worker = self.make_worker(main.device, main.threads, main.memory_limit_mb)  # type: ignore[assignment]

    # made when the main runner's first config is built (perhaps after this lane was made)
    spec = _OfMain[Any]("spec")
    specs = _OfMain[dict[str, Any]]("specs")
    first = _OfMain[str]("first")
    reference_signature = _OfMain[str]("reference_signature")
    _setup_errors = _OfMain[dict[str, Exception]]("_setup_errors")
    iters = _OfMain[dict[str, tuple[int, int]]]("iters")  # a config timed here, re-timed there

    def next_node(self) -> str:
        if self.node in self.main.nodes and self.cluster.node_alive(self.node):
            return self.node
        raise NodeLost(f"node {self.node[:12]} of a run slot was lost")

    def hardware_ok(self, node: str, hardware: dict[str, Any]) -> bool:
        return self.main.hardware_ok(node, hardware)

    def loads_on(self, node: str, why_not: str | None) -> bool:
        return self.main.loads_on(node, why_not)

    def lost(self, node: str) -> None:
        self.main.lost(node)

    # no retry elsewhere: a lost node ends this slot, and run_many gives the job to another
    run = Runner.run

    def kill_worker(self) -> None:
        if self.worker is not None:
            self.worker.kill()
