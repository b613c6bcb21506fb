"""Kernel Tuner's genetic algorithm and particle swarm, as ask/tell baselines.

Written for ask/tell over a constrained discrete space: the baselines the guided search is
measured against (``bench/search_quality.py``), usable as strategies of their own.

Both follow Kernel Tuner's published design and defaults (a population of 20; the genetic
algorithm's uniform crossover and a mutation chance of 1 in 10 per parameter; the swarm's
inertia 0.5, cognitive 2.0 and social 1.0 weights over the value positions), not its code. A
config measured before is never measured again: its known time is reused, as Kernel Tuner's
cache does, and a generation of known configs is followed by the next without a trial. A
position that is not a config of the space is moved to a valid one nearby (one parameter at a
time), or to an untried config at random.
"""

from __future__ import annotations

import math
import random
from typing import Any

from tileauto.records import Trial
from tileauto.search._sampling import Untried
from tileauto.search.base import SearchStrategy, SpaceLike, _started

_GENERATIONS_PER_ASK = 50  # generations of known configs skipped in one ask, at most


class _Population(SearchStrategy):
    """What both share: times by index, repairs into the space, and the ask loop."""

    popsize: int

    def start(self, space: SpaceLike, *, parallelism: int = 1, seed: int = 0) -> None:
        import numpy as np

        super().start(space, parallelism=parallelism, seed=seed)
        self._rng = np.random.default_rng(self.seed)
        self._untried = Untried(len(self.space), random.Random(self.seed))
        self._sizes = np.asarray([len(p.values) for p in self.space.params], dtype=np.int64)
        self._time: dict[int, float] = {}  # measured: latency, inf for a failure
        self._pending: list[int] = []  # the current generation's members

    def tell(self, index: int, trial: Trial) -> None:
        _started(self, "_untried", "tell")
        self._untried.mark([index])
        ok = trial.ok and trial.latency_ms is not None and math.isfinite(trial.latency_ms)
        self._time[index] = float(trial.latency_ms) if ok and trial.latency_ms else math.inf

    def ask(self) -> list[int]:
        _started(self, "_untried", "ask")
        if self._untried.left == 0:
            return []
        for _ in range(_GENERATIONS_PER_ASK):  # a member never measured counts as failed
            if not self._pending:
                self._pending = self._first()
            else:
                self._pending = self._next(self._pending)
            new = [i for i in dict.fromkeys(self._pending) if i not in self._time]
            if new:
                self._untried.mark(new)
                return new
        return self._untried.draw(self.popsize)  # converged on known configs: a fresh sample

    def _first(self) -> list[int]:
        return self._untried.draw(self.popsize)

    def _next(self, members: list[int]) -> list[int]:
        raise NotImplementedError

    def _fitness(self, members: list[int]) -> Any:
        import numpy as np

        return np.asarray([self._time.get(i, math.inf) for i in members])

    def _repair(self, codes: Any) -> list[int]:
        """Each row of value positions as a config of the space: itself when valid, else the
        first valid one-parameter change (in random order), else an untried config."""
        import numpy as np

        codes = np.clip(np.asarray(codes, dtype=np.int64), 0, self._sizes - 1)
        index = self.space.index_of(codes)
        out = []
        for row, i in zip(codes, index):
            if i < 0:
                i = self._nearby(row)
            out.append(int(i))
        return out

    def _nearby(self, row: Any) -> int:
        import numpy as np

        params = self._rng.permutation(len(self._sizes))
        for j in params:
            moved = np.repeat(row[None, :], self._sizes[j], axis=0)
            moved[:, j] = np.arange(self._sizes[j])
            found = self.space.index_of(moved)
            found = found[found >= 0]
            if len(found):
                # the closest value of that parameter that makes a config
                codes = self.space.codes(found)[:, j]
                return int(found[np.argmin(np.abs(codes - row[j]))])
        drawn = self._untried.draw(1)
        if drawn:
            return drawn[0]
        return int(self._rng.integers(len(self.space)))


class GeneticSearch(_Population):
    """A genetic algorithm (Kernel Tuner's ``genetic_algorithm``, its defaults).

    Args:
        popsize: members per generation.
        mutation: the chance of each parameter of a child taking a random value (1 in 10).
    """

    def __init__(self, popsize: int = 20, mutation: float = 0.1) -> None:
        if isinstance(popsize, bool) or not isinstance(popsize, int) or popsize < 2:
            raise ValueError(f"GeneticSearch popsize must be an int >= 2, got {popsize!r}")
        if not 0.0 <= mutation <= 1.0:
            raise ValueError(f"GeneticSearch mutation must be in [0, 1], got {mutation!r}")
        self.popsize, self.mutation = popsize, mutation

    def describe(self) -> str:
        return f"GeneticSearch(popsize={self.popsize}, mutation={self.mutation})"

    def _next(self, members: list[int]) -> list[int]:
        import numpy as np

        fit = self._fitness(members)
        order = np.argsort(fit, kind="stable")
        ranked = [members[i] for i in order]
        # parents by rank: the fittest are likelier (weights n, n-1, ..., 1)
        weights = np.arange(len(ranked), 0, -1, dtype=np.float64)
        weights /= weights.sum()
        codes = self.space.codes(ranked)
        children: list[Any] = []
        half = self.popsize // 2
        elite = [ranked[k] for k in range(min(half // 5 + 1, len(ranked)))]
        while len(children) + len(elite) < self.popsize:
            a, b = self._rng.choice(len(ranked), size=2, replace=False, p=weights)
            take = self._rng.random(codes.shape[1]) < 0.5  # uniform crossover
            child = np.where(take, codes[a], codes[b])
            mutate = self._rng.random(codes.shape[1]) < self.mutation
            child = np.where(mutate, self._rng.integers(0, self._sizes), child)
            children.append(child)
        return elite + self._repair(np.asarray(children))


class ParticleSwarm(_Population):
    """Particle swarm optimization (Kernel Tuner's ``pso``, its defaults), over each
    parameter's value positions scaled to [0, 1].

    Args:
        popsize: particles.
        w, c1, c2: inertia, and the pull to each particle's best and to the swarm's best.
    """

    def __init__(self, popsize: int = 20, w: float = 0.5, c1: float = 2.0, c2: float = 1.0):
        if isinstance(popsize, bool) or not isinstance(popsize, int) or popsize < 2:
            raise ValueError(f"ParticleSwarm popsize must be an int >= 2, got {popsize!r}")
        self.popsize, self.w, self.c1, self.c2 = popsize, w, c1, c2

    def describe(self) -> str:
        return f"ParticleSwarm(popsize={self.popsize}, w={self.w}, c1={self.c1}, c2={self.c2})"

    def _first(self) -> list[int]:
        import numpy as np

        members = super()._first()
        scale = np.maximum(self._sizes - 1, 1)
        self._pos = self.space.codes(members) / scale
        self._vel = self._rng.uniform(-0.1, 0.1, size=self._pos.shape)
        self._own: list[int] = list(members)  # each particle's best config
        return members

    def _next(self, members: list[int]) -> list[int]:
        import numpy as np

        fit = self._fitness(members)
        own = self._fitness(self._own)
        self._own = [m if f < o else b for m, f, o, b in zip(members, fit, own, self._own)]
        own = self._fitness(self._own)
        best = self._own[int(np.argmin(own))]
        scale = np.maximum(self._sizes - 1, 1)
        own_pos = self.space.codes(self._own) / scale
        best_pos = self.space.codes([best])[0] / scale
        r1 = self._rng.random(self._pos.shape)
        r2 = self._rng.random(self._pos.shape)
        self._vel = (
            self.w * self._vel
            + self.c1 * r1 * (own_pos - self._pos)
            + self.c2 * r2 * (best_pos - self._pos)
        )
        self._pos = np.clip(self._pos + self._vel, 0.0, 1.0)
        return self._repair(np.rint(self._pos * scale))
