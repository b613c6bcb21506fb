"""The session's view of a tuning space: configs by index, their ids, and the default config.

A list of configs is indexed as given: configs are filled with the factory's defaults, each
distinct config is searched once (by its position among the distinct ones) and its trial keeps
its first position in the list. A :class:`~tileauto.space.ProductSpace` is never expanded:
configs are decoded from their index when the search asks for them, so a product of millions
of configs costs what its constraint scan costs (see ``docs/search.md``), not a dict per
config.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tileauto.space._values import config_id
from tileauto.space.product import ProductSpace
from tileauto.space.resolve import baseline_config, full_config
from tileauto.space.types import ListSpace, Space

NEVER_TRIED_LISTED = 10_000  # a larger space counts its never-tried configs instead of listing them


def _holds_list(value: Any) -> bool:
    if isinstance(value, list):
        return True
    if isinstance(value, dict):
        return any(_holds_list(v) for v in value.values())
    return False


class SpaceView:
    """Configs of the space by search index, each with its config id.

    Attributes:
        search_space: what the search strategy is given, a :class:`Space` (the product
            itself, or a :class:`ListSpace` of the distinct filled configs).
        default: the default config, filled (the factory's defaults, or the first config).
        default_id: its config id.
        lazy: whether the space is a product decoded on demand.
    """

    def __init__(self, configs: list[dict[str, Any]] | ProductSpace, defaults: dict[str, Any]):
        self.lazy = isinstance(configs, ProductSpace)
        self._by_id: dict[str, dict[str, Any]] = {}
        self._position: dict[str, int] = {}  # config id -> position (trial index)
        self._product = configs if isinstance(configs, ProductSpace) else None
        if isinstance(configs, ProductSpace):
            self._search_space: Space | None = configs
            keys: set[str] = set(configs.names)
            self._ids: list[str] | None = None
            self._full: list[dict[str, Any]] | None = None
            self._size: int | None = None  # counted when asked: a constraint scan
        else:
            keys = {k for c in configs for k in c}
            self._full = [full_config(c, defaults, keys) for c in configs]
            ids = [config_id(c) for c in self._full]
            self._full_ids = ids
            for i, cid in enumerate(ids):
                self._position.setdefault(cid, i)
            self._by_id = {cid: c for cid, c in zip(ids, self._full)}
            self._ids = list(dict.fromkeys(ids))  # the space in order, each config once
            self._search_space = None  # made when a search asks: a cache hit never does
            self._size = len(self._ids)
        self.default = baseline_config(configs, defaults, keys)
        self.default_id = config_id(self.default)
        self._by_id.setdefault(self.default_id, self.default)
        self.default_index = self.position(self.default_id)

    @property
    def product(self) -> ProductSpace | None:
        """The product when the space is one (decoded by index), else None."""
        return self._product

    def listed_ids(self) -> list[str] | None:
        """A list's config ids in its order, one per entry (a config given twice, or given
        once with a default's value and once without, repeats its id); None for a product."""
        return None if self._product is not None else list(self._full_ids)

    def listed_configs(self) -> dict[str, dict[str, Any]] | None:
        """A list's distinct filled configs by id, in order; None for a product."""
        if self._ids is None:
            return None
        return {cid: self._by_id[cid] for cid in self._ids}

    @property
    def search_space(self) -> Space:
        if self._search_space is None:
            assert self._ids is not None
            self._search_space = ListSpace([self._by_id[cid] for cid in self._ids])
        return self._search_space

    def __len__(self) -> int:
        """How many distinct configs the space has (a constrained product scans it whole)."""
        if self._size is None:
            assert self._product is not None
            self._size = len(self._product)
        return self._size

    @property
    def counted(self) -> bool:
        """Whether the number of configs is known without scanning the rest of a product."""
        return self._product is None or self._product.counted

    def count_upto(self, k: int) -> int:
        """``min(len(self), k)``, scanning a constrained product only that far."""
        if self._product is not None:
            return self._product.count_upto(k)
        return min(len(self), k)

    @property
    def entries_bound(self) -> int:
        """What the user's space holds: a list's entries (a config given twice counts twice, as
        its trials do), else :attr:`size_bound`."""
        return self.size_bound if self._product is not None else len(self._full_ids)

    @property
    def size_bound(self) -> int:
        """The number of configs, or, while a constrained product is not counted, the size of
        the product (an upper bound)."""
        if self._product is not None and not self._product.counted:
            return self._product.product_size
        return len(self)

    def id_at(self, index: int) -> str:
        """The config id at a search index (and remember its config and position)."""
        if self._ids is not None:
            return self._ids[index]
        assert self._product is not None
        config = self._product.config(index)
        cid = config_id(config)
        self._by_id.setdefault(cid, config)
        self._position.setdefault(cid, index)
        return cid

    def config(self, cid: str) -> dict[str, Any]:
        """The filled config of an id: one seen before (from :meth:`id_at`, the default or a
        store), or one a product has (a trial an earlier run measured, which this run's search
        never proposed: decoded from its position). KeyError for a config the space lacks."""
        found = self._by_id.get(cid)
        if found is None and self._product is not None:
            index = self.position(cid)
            if index >= 0:
                found = self._by_id.setdefault(cid, self._product.config(index))
        if found is None:
            raise KeyError(cid)
        return found

    def position(self, cid: str) -> int:
        """The trial index of a config id: its position in the space, or -1 when not in it."""
        found = self._position.get(cid)
        if found is not None:
            return found
        if self._ids is not None:
            return -1
        assert self._product is not None
        config = self._by_id.get(cid)
        index = self._product.find(config if config is not None else json.loads(cid))
        if index >= 0:
            self._position[cid] = index
        return index

    def search_index(self, cid: str) -> int:
        """The search index of a config id (-1 when the space does not have it)."""
        if self._ids is None:
            return self.position(cid)
        found = self.__dict__.get("_search_index")
        if found is None:
            found = {c: i for i, c in enumerate(self._ids)}
            self.__dict__["_search_index"] = found
        return found.get(cid, -1)

    @property
    def holds_sequences(self) -> bool:
        """Whether a config of the space may hold a list, tuple or dict (which JSON may give
        back otherwise: :meth:`own`); False lets a cache hit skip looking, trial by trial."""
        found = self.__dict__.get("_holds_sequences")
        if found is None:
            if self._product is not None:
                values = (v for p in self._product.params for v in p.values)
                found = any(isinstance(v, (list, tuple, dict)) for v in values)
            else:
                assert self._full is not None
                kinds = {type(v) for c in self._full for v in c.values()}  # a few kinds
                found = any(issubclass(k, (list, tuple, dict)) for k in kinds)
            self.__dict__["_holds_sequences"] = found
        return bool(found)

    def own(self, config: dict[str, Any]) -> dict[str, Any]:
        """A config read back from JSON (a cache, a stored trial) with the space's own values.

        JSON has no tuples: a tuple of the user's comes back a list, under the same config id.
        The space's config of that id is returned instead, so the factory, ``result.config``
        and a rebuild get what the user gave; a config the space lacks is returned as it is.
        Free when the config holds no list (nothing JSON could have changed).
        """
        if not any(_holds_list(v) for v in config.values()):
            return config
        cid = config_id(config)
        found = self._by_id.get(cid)
        if found is None and self._product is not None:
            index = self.position(cid)
            found = self._product.config(index) if index >= 0 else None
        return dict(found) if found is not None else config

    def remember(self, cid: str, config: dict[str, Any]) -> None:
        """Know a config by its id (a trial a store kept), when the space has it."""
        self._by_id.setdefault(cid, config)

    def all_ids(self) -> Iterator[str]:
        """Every config id, in order (a product decodes each: use on small spaces only)."""
        return iter(self._ids) if self._ids is not None else map(self.id_at, range(len(self)))

    def lists_never_tried(self) -> bool:
        """Whether the configs never tried are listed one by one (a list, or a small product)."""
        return (
            self._ids is not None or self.count_upto(NEVER_TRIED_LISTED + 1) <= NEVER_TRIED_LISTED
        )

    def ordered(self, measured: dict[str, Any]) -> tuple[Any, ...]:
        """The trials of the space in its order: a list's, one per entry (duplicates repeat),
        or a product's measured configs by index."""
        if self._full is not None:
            return tuple(measured[cid].at_index(i) for i, cid in enumerate(self._full_ids))
        found = [(self.position(cid), t) for cid, t in measured.items()]
        return tuple(t.at_index(i) for i, t in sorted(found, key=lambda p: p[0]) if i >= 0)
