"""A pool of compile workers that builds borrow: kept between builds, each lent to one build.

A build leases the workers it runs on and gives each back when it is done with it; while
leased, a worker runs that build's jobs only, so a build can kill the workers it holds (a
cancel) without touching another build's. Workers from the forkserver stay up between builds;
workers forked from the caller are closed when their build ends
(:meth:`WorkerPool.close_forked`), since they keep the memory the caller had at the fork.

One pool serves the whole process by default (:meth:`WorkerPool.shared`); a session may own
one instead.
"""

from __future__ import annotations

import threading

from tileauto.workers.procs import Worker

COMPILE_ENV = {"TVM_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


class WorkerPool:
    """Workers lent to builds, one build at a time each. Thread-safe.

    Args:
        name: the workers are called ``<name>-0``, ``<name>-1``... (their log files too).
        env: environment variables of every worker (default: one TVM and OpenMP thread).
        memory_limit_bytes: each worker's limit (see :class:`Worker`; default 90% of the
            memory available when it is made).
    """

    _shared: WorkerPool | None = None
    _shared_lock = threading.Lock()

    def __init__(
        self,
        name: str = "compile",
        env: dict[str, str] | None = None,
        memory_limit_bytes: int | None = None,
    ) -> None:
        self.name = name
        self.env = dict(COMPILE_ENV if env is None else env)
        self.memory_limit_bytes = memory_limit_bytes
        self._lock = threading.Lock()
        self._workers: list[Worker] = []
        self._idle: list[Worker] = []
        self._close_on_return: set[Worker] = set()

    @classmethod
    def shared(cls) -> WorkerPool:
        """The process's compile pool, which builds borrow unless given their own."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = WorkerPool()
            return cls._shared

    @property
    def workers(self) -> list[Worker]:
        """Every worker of the pool, leased or idle."""
        with self._lock:
            return list(self._workers)

    def grow(self, n: int) -> list[Worker]:
        """The pool's first ``n`` workers, made if missing (none is leased by this)."""
        with self._lock:
            while len(self._workers) < n:
                self._idle.append(self._new())
            return self._workers[:n]

    def lease(self, n: int) -> list[Worker]:
        """``n`` workers for one build, lent to it alone until :meth:`give_back`.

        Idle workers that run already are lent first; new ones are made when all are lent.
        """
        with self._lock:
            self._idle.sort(key=lambda w: (not w.alive, self._workers.index(w)))
            taken, self._idle = self._idle[:n], self._idle[n:]
            while len(taken) < n:
                taken.append(self._new())
            return taken

    def give_back(self, worker: Worker) -> None:
        """End ``worker``'s lease (closed now if :meth:`close_forked` asked for it)."""
        with self._lock:
            close = worker in self._close_on_return
            self._close_on_return.discard(worker)
            if worker in self._workers and worker not in self._idle:
                self._idle.append(worker)
        if close:
            worker.close()

    def start_forked(self, n: int) -> list[Worker]:
        """Fork ``n`` idle workers from the caller now (those not running yet).

        Call it from the main thread before any other thread starts (see
        :func:`tileauto.workers.procs.fork_unsafe_reason`; a worker falls back to the forkserver
        where forking is not safe).
        """
        with self._lock:
            self._idle.sort(key=lambda w: (not w.alive, self._workers.index(w)))
            while len(self._idle) < n:
                self._idle.append(self._new())
            chosen = self._idle[:n]
        for worker in chosen:
            if not worker.alive:
                worker.fork_ok = True
                worker.start()
        return chosen

    def close_forked(self) -> None:
        """Close the workers forked from the caller: idle ones now, leased ones when given back.

        A forked worker shares the caller's memory as it was at the fork: kept alive, it would
        keep memory the caller has since freed (a model's weights, say) from going back to the
        system; forking again for the next build is cheap.
        """
        with self._lock:
            forked = [w for w in self._workers if w.start_method == "fork" and w.alive]
            idle = [w for w in forked if w in self._idle]
            self._close_on_return.update(w for w in forked if w not in self._idle)
        for worker in idle:
            worker.close()

    def close(self) -> None:
        """Kill every worker of the pool (leased ones too: their jobs end as cancelled)."""
        with self._lock:
            workers = list(self._workers)
        for worker in workers:
            worker.close()

    def _new(self) -> Worker:
        worker = Worker(
            f"{self.name}-{len(self._workers)}",
            env=self.env,
            memory_limit_bytes=self.memory_limit_bytes,
            own_tmp=True,  # what a compile killed half-way leaves goes with its worker
        )
        self._workers.append(worker)
        return worker
