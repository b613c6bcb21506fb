"""Which configs of a space are still untried, and uniform draws among them."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

_DENSE = 1 << 24  # spaces up to this size keep one flag per config; larger ones a set


class Untried:
    """The configs not yet proposed or measured, with uniform draws among them.

    Small spaces keep a flag per config; a large one keeps the set of tried indices and draws
    by rejection, which stays cheap while the tried share is small (it always is for a space
    too large to flag).
    """

    def __init__(self, n: int, rng: random.Random) -> None:
        self.n, self.rng = n, rng
        self.count = 0  # how many are tried
        self._flags: Any = None
        self._set: set[int] = set()
        if n <= _DENSE:
            import numpy as np

            self._flags = np.zeros(n, dtype=bool)

    def mark(self, indices: Iterable[int]) -> None:
        """Count these indices as tried."""
        for i in indices:
            if not self.tried(i):
                self.count += 1
                if self._flags is not None:
                    self._flags[i] = True
                else:
                    self._set.add(i)

    def tried(self, index: int) -> bool:
        return bool(self._flags[index]) if self._flags is not None else index in self._set

    def mask(self, indices: Any) -> Any:
        """Whether each of an array of indices is tried."""
        import numpy as np

        if self._flags is not None:
            return self._flags[indices]
        return np.fromiter((int(i) in self._set for i in indices), dtype=bool, count=len(indices))

    @property
    def left(self) -> int:
        return self.n - self.count

    def all(self) -> Any:
        """Every untried index (only for a space with flags, or few left)."""
        import numpy as np

        if self._flags is not None:
            return np.flatnonzero(~self._flags)
        return np.asarray([i for i in range(self.n) if i not in self._set], dtype=np.int64)

    def draw(self, k: int) -> list[int]:
        """Up to ``k`` distinct untried indices, uniformly, marked tried."""
        k = min(k, self.left)
        if k <= 0:
            return []
        if self.left <= 4 * k or (self._flags is not None and self.left <= 65536):
            pool = self.all().tolist()
            picks = self.rng.sample(pool, k)
        else:
            picks, seen = [], set()
            while len(picks) < k:
                i = self.rng.randrange(self.n)
                if i not in seen and not self.tried(i):
                    seen.add(i)
                    picks.append(i)
        self.mark(picks)
        return picks
