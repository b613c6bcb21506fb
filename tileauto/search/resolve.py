"""Strategies by name (``search="auto"``...), and the default: ``auto``."""

from __future__ import annotations

import copy
import math
import numbers
import warnings
from typing import Any

from tileauto.records import Trial
from tileauto.search.base import SearchStrategy, SpaceLike
from tileauto.search.guided import GuidedSearch, require_sklearn
from tileauto.search.prior import check_prior
from tileauto.search.strategies import Exhaustive, RandomSearch

AUTO_EXHAUSTIVE_MAX = 256  # auto measures every config of a space up to this size
AUTO_BUDGET_SHARE = 0.05  # above it, auto's guided search measures this share (at least 256)
NAMES = ("auto", "exhaustive", "guided", "random")


def auto_budget(n: int) -> int:
    """How many configs ``auto`` measures in a space of ``n`` configs above the exhaustive size."""
    return min(n, max(AUTO_EXHAUSTIVE_MAX, math.ceil(AUTO_BUDGET_SHARE * n)))


class AutoSearch(SearchStrategy):
    """Exhaustive up to :data:`AUTO_EXHAUSTIVE_MAX` configs; guided above, with a budget of
    :func:`auto_budget` (5% of the space, at least 256 configs; why 5%: ``docs/search.md``).
    Under a ``max_trials`` smaller than the space (:meth:`within`), the guided search gets that
    budget at any space size. Without scikit-learn, a space above the exhaustive size is sampled
    at random with the same budget, after one warning.
    """

    warned = False  # one warning per process

    def __init__(self, budget: int | None = None, *, prior: Any = "auto") -> None:
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1
        ):
            raise ValueError(f"AutoSearch budget must be an int >= 1 or None, got {budget!r}")
        check_prior(prior, "AutoSearch")
        self.budget = None if budget is None else int(budget)
        self.prior = prior  # as GuidedSearch takes it
        self._given: Any = None
        self._family: str | None = None
        self.limit: int | None = None  # the loop's max_trials (see within)
        self.inner: SearchStrategy = Exhaustive()
        self._ran: AutoSearch | None = None  # the copy within() made, which ran instead

    def start(self, space: SpaceLike, *, parallelism: int = 1, seed: int = 0) -> None:
        super().start(space, parallelism=parallelism, seed=seed)
        self._ran = None  # this one runs: its own facts
        n = len(self.space)
        budget = self.budget if self.budget is not None else auto_budget(n)
        if self.limit is not None:  # the user's max_trials decides, whatever the space's size
            budget = min(self.limit, n)
        small = n <= AUTO_EXHAUSTIVE_MAX and self.budget is None and self.limit is None
        if budget >= n or small:
            self.inner = Exhaustive()
        else:
            try:
                require_sklearn(
                    f"search='auto' on a space of more than {AUTO_EXHAUSTIVE_MAX} configs"
                )
                guided = GuidedSearch(budget, prior=self.prior)
                guided.use_prior(self._given)
                guided.use_family(self._family)
                self.inner = guided
            except ImportError as exc:
                if not AutoSearch.warned:
                    AutoSearch.warned = True
                    warnings.warn(
                        f"{exc}; sampling {budget} configs at random instead", stacklevel=2
                    )
                self.inner = RandomSearch(budget)
        self.inner.start(self.space, parallelism=self.parallelism, seed=self.seed)

    def within(self, max_trials: int) -> AutoSearch:
        """This search under a loop's ``max_trials``: a space larger than that is guided with
        ``max_trials`` as its budget (not walked in order and cut; not stopped at 5% first)."""
        if self.budget is not None:
            return self
        bounded = copy.copy(self)  # every setting and what was handed in (prior, family)
        bounded.limit = max_trials
        bounded.inner = Exhaustive()  # start() chooses its own
        self._ran = bounded  # what it learned (prior_facts) is asked of this object too
        return bounded

    def use_prior(self, source: Any) -> None:
        """Records for the guided search's ``prior="auto"`` (see :class:`GuidedSearch`)."""
        self._given = source

    def use_family(self, family: str | None) -> None:
        """The tuned call's family, for the guided search (see :meth:`GuidedSearch.use_family`)."""
        self._family = family

    def prior_facts(self) -> dict[str, Any] | None:
        """The guided search's :meth:`GuidedSearch.prior_facts` (None: no prior, or exhaustive),
        of the last search this object ran, or the copy of it :meth:`within` sized to a
        ``max_trials`` ran."""
        ran = getattr(self, "_ran", None)  # a subclass may not call __init__
        if ran is not None and ran is not self:
            return ran.prior_facts()
        facts = getattr(self.inner, "prior_facts", None)
        return facts() if callable(facts) else None

    def ask(self) -> list[int]:
        return self.inner.ask()

    def tell(self, index: int, trial: Trial) -> None:
        self.inner.tell(index, trial)

    def describe(self) -> str:
        if self.prior == "auto":
            return f"auto(budget={self.budget})"
        from tileauto.search.prior import describe_prior

        return f"auto(budget={self.budget}, prior={describe_prior(self.prior)})"


def resolve_search(search: Any) -> SearchStrategy:
    """The strategy for ``search=``: a name, a strategy object, or None.

    - ``"exhaustive"``: :class:`Exhaustive`;
    - None or ``"auto"`` (the default): :class:`AutoSearch`; ``"guided"``: :class:`GuidedSearch` (needs the
      ``search`` extra); ``"random"``: :class:`RandomSearch` with no budget of its own;
    - a strategy object (a :class:`SearchStrategy`, or any object with ``start``, ``ask``,
      ``tell`` and ``describe``) as it is.

    Raises:
        TypeError: anything else (the message lists the names), a strategy's class in place
            of an instance (``search=GuidedSearch``) included.
        ImportError: ``"guided"`` without scikit-learn (the message names the extra).
    """
    if search == "exhaustive":
        return Exhaustive()
    if search is None or search == "auto":
        return AutoSearch()
    if search == "guided":
        require_sklearn("search='guided'")
        return GuidedSearch()
    if search == "random":
        return RandomSearch()
    if isinstance(search, type):  # search=GuidedSearch: has every method, but unbound
        raise TypeError(
            f"search must be a strategy object, not its class: pass an instance, "
            f"{search.__name__}() (or {search.__name__}(budget=...)), got the class {search!r}"
        )
    if isinstance(search, SearchStrategy):
        return search
    if all(callable(getattr(search, m, None)) for m in ("start", "ask", "tell", "describe")):
        return search
    raise TypeError(
        f"search must be one of {list(NAMES)} or a tileauto.search.SearchStrategy "
        f"(e.g. RandomSearch(budget=8), GuidedSearch(budget=64)), got {search!r}"
    )
