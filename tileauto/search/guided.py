"""A model-guided search for discrete, constrained spaces whose configs can fail.

Each batch, one random forest learns which configs are good (fast) and another which fail; the
untried configs of the space (or a sample, plus the neighbours of the best) are scored
P(good) x P(passes) and picked greedily, spread apart, with a few local and random picks.
Only configs of the space are proposed, never one twice. The algorithm, its settings and the
measurements that chose it are in ``docs/search.md`` ("The guided search").
"""

from __future__ import annotations

import importlib
import math
import numbers
import random
import warnings
from typing import Any

from tileauto.records import Trial
from tileauto.search._features import Encoder
from tileauto.search._forest import Forest, p_true
from tileauto.search._sampling import Untried
from tileauto.search.base import SearchStrategy, SpaceLike, _started
from tileauto.search.prior import (
    Prior,
    PriorSource,
    agreement,
    check_prior,
    describe_prior,
    match,
)

EXTRA = "search"  # pip install "tileauto[search]"
_STALL_TOP = 8  # when stuck, the neighbourhoods of this many best configs are avoided:
_STALL_RADIUS = 2  # the configs within this many parameters of one of them
_STALL_FACTOR = 0.1  # score this much
_SAMPLE = 8_000  # candidates drawn per batch from a space with more than ``pool`` untried
_TRUST = 0.3  # a prior record counts once it ranks this space's measurements this alike (rho)
# when no record earned trust on the prior's first batch, this share of the next one is random:
# that batch followed records that do not fit and told the model little (docs/search.md)
_REEXPLORE = 0.5
# prior_order="apart": each next config of the first batch differs from those taken in at
# least this many parameters (one fewer than the space has, if that is fewer), the prior's
# ranking scanned this far for them
_APART, _APART_SCAN = 3, 512


def _real(value: Any) -> bool:
    """A plain number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def require_sklearn(what: str) -> None:
    """Raise ImportError naming the extra when scikit-learn is not installed."""
    try:
        importlib.import_module("sklearn")
    except ImportError:
        raise ImportError(
            f"{what} needs scikit-learn, which is not installed; install the extra with "
            f'pip install "tileauto[{EXTRA}]" (or pip install scikit-learn), or use '
            "search='random' or 'exhaustive'"
        ) from None


class GuidedSearch(SearchStrategy):
    """Model-guided search (random forests of good and of failing configs).

    Args:
        budget: how many configs to propose in all; None: until the loop's budget stops it.
        batch: configs per batch; None: ``max(parallelism, 8)`` (a batch is one model fit).
        initial: random configs before the first model; None: one batch (at least 8).
        trees: trees per forest.
        good_fraction: the share of passing configs that count as good (at least 5 do).
        explore: the share of each batch drawn at random.
        pool: the most untried configs scored whole per batch; a space with more untried is
            sampled (8,000 configs, and the one-parameter changes of the 8 best).
        local: configs of each batch taken among the one-parameter changes of the best config.
        stall: batches without a better config after which the neighbourhoods of the best
            configs are avoided (0: never).
        step_out: how long they are avoided: ``"once"`` (default) for one batch, after which
            the search works near the best configs again for ``stall`` batches before it
            steps out again (still stuck); ``"stay"``: every batch until a better config is
            found (the rule before 2026-11-28: in a flat space, where many configs lie within
            a fraction of a percent of the optimum, it kept the search from the last steps to
            it; docs/search.md, "A thirteenth test").
        prior_order: how the prior's configs fill the first batch: ``"apart"`` (default) in
            the order of the records' mean percentile, each next config at least three
            parameters away from those taken (in a space of fewer than four parameters, all
            but one): a hedge against records of problems unlike this one, whose best configs
            crowd one region (docs/search.md, "A tenth test");
            ``"mean"``: in that order alone; ``"turns"``: the best on average, then each
            record's own best in turn (records that disagree each get their optimum tried; on
            spaces recorded after the design it was level with or below ``"mean"``:
            docs/search.md, "A fourth test").
        seed: None: the seed the search is started with.
        prior: records of the same kernel measured elsewhere (other devices or targets): a
            :class:`~tileauto.search.RecordedSpace`, a file of one, a list of trials, a list of
            these, or a callable returning them (see :mod:`tileauto.search.prior`). The first
            batch leans on them, and afterwards each record counts as far as it ranks this
            space's measurements alike. ``"auto"`` (default): what the caller hands in through
            :meth:`use_prior` (the tuner: the trials of the same kernel on other targets found
            in its cache; :func:`~tileauto.search.replay`: its ``prior=``); None: no prior.
    """

    def __init__(
        self,
        budget: int | None = None,
        *,
        batch: int | None = None,
        initial: int | None = None,
        trees: int = 20,
        good_fraction: float = 0.2,
        explore: float = 0.1,
        pool: int = 20_000,
        local: int = 2,
        stall: int = 2,
        step_out: str = "once",
        crossover: int = 0,
        parzen: int = 0,
        prior_order: str = "apart",
        seed: int | None = None,
        prior: PriorSource = "auto",
    ) -> None:
        for name, value in (("budget", budget), ("batch", batch), ("initial", initial)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1
            ):
                raise ValueError(f"GuidedSearch {name} must be an int >= 1 or None, got {value!r}")
        budget, batch, initial = (None if v is None else int(v) for v in (budget, batch, initial))
        if not _real(good_fraction) or not 0.0 < good_fraction < 1.0:
            raise ValueError(
                f"GuidedSearch good_fraction must be a number in (0, 1), got {good_fraction!r}"
            )
        if not _real(explore) or not 0.0 <= explore <= 1.0:
            raise ValueError(f"GuidedSearch explore must be a number in [0, 1], got {explore!r}")
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0
        ):
            raise ValueError(f"GuidedSearch seed must be an int >= 0 or None, got {seed!r}")
        if not isinstance(trees, int) or trees < 1 or not isinstance(pool, int) or pool < 100:
            raise ValueError(f"GuidedSearch needs trees >= 1 and pool >= 100, got {trees}, {pool}")
        for name, value in (
            ("local", local),
            ("stall", stall),
            ("crossover", crossover),
            ("parzen", parzen),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"GuidedSearch {name} must be an int >= 0, got {value!r}")
        self.budget, self.batch, self.initial = budget, batch, initial
        self.trees, self.good_fraction, self.explore, self.pool = (
            trees,
            good_fraction,
            explore,
            pool,
        )
        self.local, self.stall, self.crossover = local, stall, crossover
        self.parzen = parzen
        if prior_order not in ("mean", "turns", "apart"):
            raise ValueError(
                f'GuidedSearch prior_order must be "mean", "turns" or "apart", got {prior_order!r}'
            )
        self.prior_order = prior_order
        if step_out not in ("once", "stay"):
            raise ValueError(f'GuidedSearch step_out must be "once" or "stay", got {step_out!r}')
        self.step_out = step_out
        self.own_seed = None if seed is None else int(seed)
        check_prior(prior, "GuidedSearch")
        self.prior = prior
        self._given: PriorSource = None  # what use_prior() handed in, for prior="auto"
        self._family: str | None = None  # what use_family() handed in

    def describe(self) -> str:
        seed = "" if self.own_seed is None else f", seed={self.own_seed}"
        prior = "" if self.prior == "auto" else f", prior={describe_prior(self.prior)}"
        cross = f", crossover={self.crossover}" if self.crossover else ""
        cross += f", parzen={self.parzen}" if self.parzen else ""
        cross += f", prior_order={self.prior_order!r}" if self.prior_order != "apart" else ""
        cross += f", step_out={self.step_out!r}" if self.step_out != "once" else ""
        return (
            f"GuidedSearch(budget={self.budget}, batch={self.batch}, initial={self.initial}, "
            f"trees={self.trees}, good_fraction={self.good_fraction}, explore={self.explore}, "
            f"pool={self.pool}, local={self.local}, stall={self.stall}{cross}{seed}{prior})"
        )

    def use_prior(self, source: PriorSource) -> None:
        """Records handed in by the caller, for ``prior="auto"`` (a list, or a callable
        returning one, called at :meth:`start`); ignored when the search was given records of
        its own, or ``prior=None``."""
        self._given = source

    def use_family(self, family: str | None) -> None:
        """The tuned call on every target and device (the tuner's; a replay's record's): the
        prior's records of the same family (a trial export's ``family``) are read as
        :class:`~tileauto.search.SameProblem`."""
        self._family = family

    def start(self, space: SpaceLike, *, parallelism: int = 1, seed: int = 0) -> None:
        require_sklearn("search='guided'")
        import numpy as np

        super().start(space, parallelism=parallelism, seed=seed)
        seed = self.own_seed if self.own_seed is not None else self.seed
        self._rng = np.random.default_rng(seed)
        self._untried = Untried(len(self.space), random.Random(seed))
        self._encoder = Encoder(self.space)
        self._size = self.batch or max(self.parallelism, 8)
        self._first = self.initial or max(self._size, 8)
        self._asked = 0
        self._told: list[int] = []
        self._logs: list[float] = []  # log latency, NaN for a failed config
        self._bests: list[float] = []  # the best log latency at each model-guided batch
        self._stepped = -(1 << 30)  # the model-guided batch that last stepped out
        source = self._given if self.prior == "auto" else self.prior
        # every record with why it was dropped, kept for prior_facts() (matched: those used)
        self.prior_matched: Prior | None = (
            match(self.space, source, family=self._family) if source is not None else None
        )
        self.matched: Prior | None = self.prior_matched
        if self.matched is not None and not len(self.matched):
            if self.prior != "auto":  # the user's own records: say why none is used
                why = "; ".join(self.matched.dropped) or "no records"
                warnings.warn(
                    f"GuidedSearch prior matched no config of the space, so the search runs "
                    f"without one ({why[:600]})",
                    stacklevel=2,
                )
            self.matched = None
        self._queue: Any = None  # the prior's configs, most promising first
        self._trust: Any = None  # how far each prior record ranks this space alike

    def prior_facts(self) -> dict[str, Any] | None:
        """What the prior was after :meth:`start` (None: no prior was given or handed in): the
        records it used (``matched``) and the dropped ones, each with why (``dropped``), as
        plain data for a tuning's stored facts or log."""
        prior = getattr(self, "prior_matched", None)
        if prior is None:
            return None
        return {"matched": [s.name for s in prior.sources], "dropped": list(prior.dropped)}

    def tell(self, index: int, trial: Trial) -> None:
        _started(self, "_untried", "tell")
        if (
            isinstance(index, bool)
            or not isinstance(index, numbers.Integral)
            or not (0 <= index < self._untried.n)
        ):
            raise ValueError(
                f"GuidedSearch.tell index must be an index of the space (0 to "
                f"{self._untried.n - 1}), got {index!r}"
            )
        index = int(index)
        self._untried.mark([index])
        self._told.append(index)
        latency = trial.latency_ms
        good = trial.ok and latency is not None and math.isfinite(latency)
        self._logs.append(
            math.log(max(latency, 1e-12)) if good and latency is not None else math.nan
        )

    def ask(self) -> list[int]:
        _started(self, "_untried", "ask")
        k = min(self._size, self._untried.left)
        if self.budget is not None:
            k = min(k, self.budget - self._asked)
        if k <= 0:
            return []
        picks = None
        if len(self._told) >= self._first and self._encoder.width:
            picks = self._guided(k)
        if picks is None and self.matched is not None and not self._told:
            # the first batch: the prior's best configs, a quarter at random
            picks = self._from_prior(k - k // 4)
            picks += self._untried.draw(k - len(picks))
        if picks is None:
            picks = self._untried.draw(k)
        self._asked += len(picks)
        return picks

    # -- one model-guided batch ----------------------------------------------------------------
    def _guided(self, k: int) -> list[int] | None:
        sklearn = importlib.import_module("sklearn")
        # the inputs are ours and finite: scikit-learn's checks of them cost more than the trees
        with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
            return self._guided_batch(k)

    def _guided_batch(self, k: int) -> list[int] | None:
        import numpy as np

        told = np.asarray(self._told, dtype=np.int64)
        logs = np.asarray(self._logs)
        ok = ~np.isnan(logs)
        if ok.sum() < 2:
            return None
        ranked = np.sort(logs[ok])
        threshold = max(np.quantile(logs[ok], self.good_fraction), ranked[min(5, len(ranked)) - 1])
        good = ok & (logs <= threshold)
        if good.sum() == ok.sum():  # nothing passing is bad yet: nothing to tell apart
            return None
        weight = np.ones(len(logs))
        lift = threshold - logs[good] + 1e-3  # the faster, the more a good config counts
        weight[good] = lift * good.sum() / lift.sum()
        told_codes = self.space.codes(told)
        rows = self._encoder.rows(told_codes)
        weights = self._prior_weights(told_codes, logs)
        if weights is not None:
            rows = np.concatenate([rows, self._prior_column(told_codes, weights)], axis=1)
        good_model = self._forest().fit(rows[ok], good[ok], sample_weight=weight[ok])
        fail_model = self._forest().fit(rows, ok) if not ok.all() else None

        candidates = self._candidates(told, logs)
        if len(candidates) == 0:
            return None
        cand_codes = self.space.codes(candidates)
        cand_rows = self._encoder.rows(cand_codes)
        if weights is not None:
            cand_rows = np.concatenate([cand_rows, self._prior_column(cand_codes, weights)], axis=1)
        score = p_true(good_model, cand_rows)
        passes = p_true(fail_model, cand_rows) if fail_model is not None else None
        if passes is not None:
            score = score * passes
        score = score + 1e-9 * self._rng.random(len(score))  # ties broken at random, seeded

        ranked_told = told[ok][np.argsort(logs[ok], kind="stable")]  # passing, fastest first
        self._bests.append(float(logs[ok].min()))
        now = len(self._bests) - 1
        if self.stall and now >= self.stall and self._bests[-1] >= self._bests[-1 - self.stall]:
            # stuck: step out of the basin (once: then back in it for stall batches)
            if self.step_out == "stay" or now - self._stepped > self.stall:
                self._stepped = now
                top = self.space.codes(ranked_told[:_STALL_TOP])
                far = (cand_codes[:, None, :] != top[None, :, :]).sum(axis=2).min(axis=1)
                score[far <= _STALL_RADIUS] *= _STALL_FACTOR
                if passes is not None:  # far from what is known, failing is likelier
                    score *= passes

        explore = self._explore_count(k)
        picks: list[int] = []
        if weights is not None:  # slots for the prior's next configs, as many as it earns
            share = 0.5 * float(weights.max())
            for i in self._from_prior(int(round(share * (k - explore))), weights, mark=False):
                hit = np.flatnonzero(candidates == i)
                if len(hit):
                    self._pick(int(hit[0]), candidates, cand_codes, score, picks)
                else:
                    picks.append(i)
        if self.local:  # the best-scored one-parameter changes of the best config
            near = np.isin(candidates, _neighbours(self.space, self.space.codes(ranked_told[:1])))
            for _ in range(min(self.local, int(near.sum()), k - explore - len(picks))):
                best = int(np.argmax(np.where(near, score, -np.inf)))
                self._pick(best, candidates, cand_codes, score, picks)
                near[best] = False
        if self.parzen:  # a second opinion: per-parameter value densities, good against not
            self._parzen_picks(
                told_codes, good, candidates, cand_codes, score, passes, picks, k - explore
            )
        if self.crossover:  # children of two of the best configs, the best-scored ones
            self._children(ranked_told, candidates, cand_codes, score, picks, k - explore)
        for _ in range(min(k - explore - len(picks), len(candidates) - len(picks))):
            self._pick(int(np.argmax(score)), candidates, cand_codes, score, picks)
        self._untried.mark(picks)
        return picks + self._untried.draw(k - len(picks))

    # -- the prior ---------------------------------------------------------------------------
    def _prior_weights(self, told_codes: Any, logs: Any) -> Any:
        """How much each prior record counts now (None: none ranks this space alike)."""
        import numpy as np

        if self.matched is None:
            return None
        rho = agreement(self.matched.lookup(told_codes), logs)
        self._trust = rho
        if not (rho >= _TRUST).any():
            return None
        return np.where(rho >= _TRUST, rho, 0.0) ** 2

    def _prior_column(self, codes: Any, weights: Any) -> Any:
        """The records' percentiles of ``codes``, averaged by weight (0.5 where none says)."""
        import numpy as np

        pct = self.matched.lookup(codes) if self.matched is not None else None
        if pct is None:
            return np.full((len(codes), 1), 0.5)
        have = ~np.isnan(pct)
        w = np.where(have, weights[None, :], 0.0)
        total = w.sum(axis=1)
        mean = np.where(have, pct, 0.0) @ weights / np.where(total > 0, total, 1.0)
        return np.where(total > 0, mean, 0.5)[:, None]

    def _from_prior(self, k: int, weights: Any = None, *, mark: bool = True) -> list[int]:
        """The ``k`` untried configs the prior ranks best (by ``weights``, or equally)."""
        import numpy as np

        if k <= 0 or self.matched is None:
            return []
        if self._queue is None:
            self._queue = (
                self.matched.in_turns(self._rng)
                if self.prior_order == "turns"
                else self.matched.ranked(self._rng)
            )
        queue = self._queue[~self._untried.mask(self._queue)] if len(self._queue) else self._queue
        if weights is not None and len(queue):
            queue = queue[
                np.argsort(
                    self._prior_column(self.space.codes(queue), weights)[:, 0], kind="stable"
                )
            ]
        apart = min(_APART, len(self.space.params) - 1)
        if self.prior_order == "apart" and weights is None and mark and apart > 1:
            codes = self.space.codes(queue[:_APART_SCAN])
            picks = [int(i) for i in queue[_kept_apart(codes, k, apart)]]
        else:
            picks = [int(i) for i in queue[:k]]
        if mark:
            self._untried.mark(picks)
        return picks

    def _children(
        self,
        ranked_told: Any,
        candidates: Any,
        cand_codes: Any,
        score: Any,
        picks: list[int],
        room: int,
    ) -> None:
        """Uniform crossover of two of the 8 best configs (one parameter in ten mutated): of
        the children that are untried configs, the best-scored take ``crossover`` slots."""
        import numpy as np

        top = self.space.codes(ranked_told[:8])
        if len(top) < 2:
            return
        n = 32
        a = self._rng.integers(0, len(top), size=n)
        b = (a + self._rng.integers(1, len(top), size=n)) % len(top)
        child = np.where(self._rng.random((n, top.shape[1])) < 0.5, top[a], top[b])
        sizes = np.asarray([len(p.values) for p in self.space.params])
        mutate = self._rng.random(child.shape) < 0.1
        child = np.where(mutate, self._rng.integers(0, sizes, size=child.shape), child)
        found = np.unique(self.space.index_of(child))
        at = np.flatnonzero(np.isin(candidates, found))
        for _ in range(min(self.crossover, len(at), room - len(picks))):
            best = at[int(np.argmax(score[at]))]
            if not np.isfinite(score[best]):
                break
            self._pick(int(best), candidates, cand_codes, score, picks)

    def _parzen_picks(
        self,
        told_codes: Any,
        good: Any,
        candidates: Any,
        cand_codes: Any,
        score: Any,
        passes: Any,
        picks: list[int],
        room: int,
    ) -> None:
        """``parzen`` slots for the candidates a TPE-style ratio ranks best: per parameter, the
        share of the good configs with a candidate's value over the share of the others
        (failed ones included; add-one smoothed), multiplied over the parameters. The forest
        needs a few good configs to split on; this ratio ranks by each value on its own, so it
        still points somewhere when the good configs are few (the spaces with 1-10 configs
        within 5% of the optimum), and it is another view of the same trials."""
        import numpy as np

        n_good, n_rest = float(good.sum()), float((~good).sum())
        ratio = np.zeros(len(candidates))
        for j, param in enumerate(self.space.params):
            size = len(param.values)
            if size < 2:
                continue
            in_good = np.bincount(told_codes[good, j], minlength=size) + 1.0
            in_rest = np.bincount(told_codes[~good, j], minlength=size) + 1.0
            table = np.log(in_good / (n_good + size)) - np.log(in_rest / (n_rest + size))
            ratio += table[cand_codes[:, j]]
        ratio = np.exp(ratio - ratio.max())
        if passes is not None:
            ratio = ratio * passes
        ratio = np.where(np.isfinite(score), ratio, -np.inf)  # not one picked already
        for _ in range(min(self.parzen, room - len(picks), len(candidates) - len(picks))):
            best = int(np.argmax(ratio))
            if not np.isfinite(ratio[best]):
                break
            ratio[np.count_nonzero(cand_codes != cand_codes[best], axis=1) <= 2] *= 0.5
            ratio[best] = -np.inf
            self._pick(best, candidates, cand_codes, score, picks)

    @staticmethod
    def _pick(best: int, candidates: Any, cand_codes: Any, score: Any, picks: list[int]) -> None:
        """Pick candidate ``best``, and halve the score of the candidates near it."""
        import numpy as np

        picks.append(int(candidates[best]))
        score[np.count_nonzero(cand_codes != cand_codes[best], axis=1) <= 2] *= 0.5
        score[best] = -np.inf  # never picked twice

    def _explore_count(self, k: int) -> int:
        expected = self.explore * k
        whole = int(expected)
        count = whole + int(self._rng.random() < expected - whole)
        if len(self._bests) == 1 and self._trust is not None and not (self._trust >= _TRUST).any():
            count = max(count, int(round(_REEXPLORE * k)))  # the prior's first batch missed
        return count

    def _candidates(self, told: Any, logs: Any) -> Any:
        """Untried indices to score: all of them, or a sample and the best configs' neighbours."""
        import numpy as np

        if self._untried.left <= self.pool:
            return self._untried.all()
        sample = np.unique(self._rng.integers(0, len(self.space), size=_SAMPLE))
        ok = ~np.isnan(logs)
        best = told[ok][np.argsort(logs[ok])[:8]]
        near = _neighbours(self.space, self.space.codes(best))
        both = np.union1d(sample, near)
        return both[~self._untried.mask(both)]

    def _forest(self) -> Forest:
        return Forest(self.trees, int(self._rng.integers(2**31 - 1)))


def _neighbours(space: Any, codes: Any) -> Any:
    """Indices of the configs that differ from one of ``codes`` in exactly one parameter."""
    import numpy as np

    found = []
    for j, param in enumerate(space.params):
        size = len(param.values)
        if size < 2:
            continue
        moved = np.repeat(codes, size, axis=0)
        moved[:, j] = np.tile(np.arange(size), len(codes))
        found.append(space.index_of(moved))
    if not found:
        return np.zeros(0, dtype=np.int64)
    every = np.concatenate(found)
    return np.unique(every[every >= 0])


def _kept_apart(codes: Any, k: int, apart: int) -> Any:
    """Positions of up to ``k`` rows of ``codes``, in order, each at least ``apart``
    parameters away from those taken before it."""
    import numpy as np

    taken: list[int] = []
    for i, row in enumerate(codes):
        if len(taken) == k:
            break
        if not taken or ((codes[taken] != row).sum(axis=1) >= apart).all():
            taken.append(i)
    return np.asarray(taken, dtype=np.int64)
