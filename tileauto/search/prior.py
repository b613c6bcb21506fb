"""A prior: what records of the same kernel, measured elsewhere, say of a space's configs.

A record measured on another device (or target, or with other problem sizes) ranks configs
that the space may share. Each record is matched to the space parameter by parameter, by name
and by value: a record's parameter the space lacks is ignored (its records collapse onto the
configs they share, the best of them counting), a space parameter the record lacks matches any
value, and a record whose value the space does not have matches nothing. Nothing about a record
is an error: one that matches nothing is dropped, and says so in :attr:`Prior.dropped`.

Each record gives every config it matches a *percentile*: 0.0 its fastest config, 1.0 its
slowest, failures 1.0. A strategy reads them with :meth:`Prior.lookup` (one column per record,
NaN where it has nothing to say) and learns, from its own trials, how far to trust each one
(:func:`agreement`).

Records of the *same problem* measured elsewhere (:class:`SameProblem`: what the cache prior
finds first) and records of other problems answer two guesses, that what transfers is the
problem's shape or the device's; the first batch, before any trial says which, takes turns
between the two (:meth:`Prior.ranked`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from tileauto.records import Trial, TrialStatus
from tileauto.space import Space

# What prior= takes: records (RecordedSpace, a file of one, a list of trials), or a callable
# that returns them (a cache, a remote store), called once when the search starts.
PriorSource: TypeAlias = "Any"
_MAX_EXPAND = 64  # a record missing space parameters fills at most this many configs each


@dataclass(frozen=True)
class SameProblem:
    """Records of the same problem (the same kernel and call) measured on other devices or
    targets, as one part of a prior: ``prior=[SameProblem([h100_record]), *other_shapes]``.

    They are matched like any record; only the first batch reads them apart: it takes turns
    between their ranking and the whole prior's (the same problem's best first), so that
    neither the other problems' consensus (another shape wants other cache tiles) nor another
    device's ranking alone (another register file) decides it. A prior that is all
    ``SameProblem``, or has none, fills the first batch by the mean as before.

    Attributes:
        records: anything ``prior=`` takes as a list: recorded spaces, paths, lists of trials.
    """

    records: Sequence[Any]

    def __post_init__(self) -> None:
        if isinstance(self.records, (str, bytes, Path)) or not isinstance(self.records, Sequence):
            raise TypeError(
                "SameProblem records must be a list of recorded spaces, paths or lists of "
                f"trials, got {type(self.records).__name__} {self.records!r:.80}"
            )


@dataclass
class _Source:
    """One record, matched to the space: keys over the parameters it shares, and percentiles."""

    name: str
    shared: list[int]  # positions of the space parameters the record has
    radix: Any  # the mixed radix of those parameters' codes
    keys: Any  # sorted int64 keys of the matched configs
    pct: Any  # the percentile of each key (0 fastest, 1 slowest or failed)
    sizes: list[int]
    failed: Any = None  # whether each key failed in the record (its best record did)
    same_problem: bool = False  # given as SameProblem: the same call measured elsewhere


@dataclass
class Prior:
    """The records of a prior, matched to one space.

    Attributes:
        sources: the records that matched at least one config of the space.
        dropped: a line for each record that matched nothing, saying why.
    """

    space: Space
    sources: list[_Source] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sources)

    def lookup(self, codes: Any) -> Any:
        """Each record's percentile for each row of ``codes`` (rows x records; NaN: no match)."""
        import numpy as np

        out = np.full((len(codes), len(self.sources)), np.nan)
        for j, src in enumerate(self.sources):
            if not len(src.keys):
                continue
            keys = codes[:, src.shared] @ src.radix if src.shared else np.zeros(len(codes), int)
            at = np.minimum(np.searchsorted(src.keys, keys), len(src.keys) - 1)
            hit = src.keys[at] == keys
            out[hit, j] = src.pct[at[hit]]
        return out

    def ranked(self, rng: Any, limit: int = 4096) -> Any:
        """Indices of the space, most promising first by the records' mean percentile
        (the best ``limit`` of each record, completed where it lacks a parameter).

        Where some records are the same problem's (:class:`SameProblem`) and some are not,
        the two rankings take turns: the same problem's mean first, then the whole prior's,
        each index once."""
        found = [self._best_of(src, rng, limit) for src in self.sources]
        every = self._by_mean(found)
        near = [j for j, src in enumerate(self.sources) if src.same_problem]
        if not near or len(near) == len(self.sources):
            return every
        return _turns([self._by_mean([found[j] for j in near], near), every])

    def in_turns(self, rng: Any, limit: int = 4096) -> Any:
        """Indices of the space, the records taking turns: the best config by the mean
        percentile, then each record's best in turn, then each one's second best, and so on
        (each index once). Where the records disagree, each of their optima is tried early."""
        found = [self._best_of(src, rng, limit) for src in self.sources]
        return _turns([self._by_mean(found)[:1], *found])

    def _by_mean(self, found: list[Any], columns: list[int] | None = None) -> Any:
        """The indices of ``found`` (each record's best), by the mean percentile of the
        records (of those at ``columns``, if given)."""
        import numpy as np

        if not found:
            return np.zeros(0, dtype=np.int64)
        every = np.unique(np.concatenate(found))
        if not len(every):
            return every
        pct = self.lookup(self.space.codes(every))
        if columns is not None:
            pct = pct[:, columns]
        score = np.nanmean(_filled(pct), axis=1)
        return every[np.argsort(score, kind="stable")]

    def _best_of(self, src: _Source, rng: Any, limit: int) -> Any:
        """The space's indices of ``src``'s best ``limit`` configs, best first (completed
        where the record lacks a parameter: every value while few, else a sample)."""
        import numpy as np

        params = self.space.params
        order = np.argsort(src.pct, kind="stable")
        if src.failed is not None:  # what failed elsewhere is no candidate: it fails here too
            order = order[~src.failed[order]]
        order = order[:limit]
        codes = np.zeros((len(order), len(params)), dtype=np.int64)
        rest = src.keys[order]
        for j, size in zip(reversed(src.shared), reversed(src.sizes)):
            codes[:, j] = rest % size
            rest = rest // size
        missing = [j for j in range(len(params)) if j not in src.shared]
        if missing:
            sizes = [len(params[j].values) for j in missing]
            total = math.prod(sizes)
            copies = min(total, _MAX_EXPAND)
            rows = len(codes)
            codes = np.repeat(codes, copies, axis=0)
            if total <= _MAX_EXPAND:  # every combination of the missing values
                every = np.indices(sizes).reshape(len(sizes), -1).T
                codes[:, missing] = np.tile(every, (rows, 1))
            else:
                for j, size in zip(missing, sizes):
                    codes[:, j] = rng.integers(0, size, size=len(codes))
        found = self.space.index_of(codes)
        found = found[found >= 0]
        _, first = np.unique(found, return_index=True)
        return found[np.sort(first)]


def _turns(rankings: list[Any]) -> Any:
    """The rankings taking turns: each one's first, then each one's second, and so on, each
    index once (where one runs out, the others go on)."""
    import numpy as np

    width = max(len(r) for r in rankings)
    grid = np.full((width, len(rankings)), -1, dtype=np.int64)
    for j, r in enumerate(rankings):
        grid[: len(r), j] = r
    flat = grid.reshape(-1)
    flat = flat[flat >= 0]
    _, first = np.unique(flat, return_index=True)
    return flat[np.sort(first)]


def _filled(columns: Any) -> Any:
    import numpy as np

    out = columns.copy()
    out[np.isnan(out).all(axis=1)] = 0.5
    return out


def agreement(prior_pct: Any, logs: Any) -> Any:
    """How well each record's percentiles rank the configs measured here (Spearman's rho, one
    per record; 0.0 with fewer than 6 shared measurements). Failures rank last."""
    import numpy as np

    worst = np.nanmax(logs) + 1.0 if np.isfinite(np.nanmax(logs, initial=-np.inf)) else 1.0
    seen = np.where(np.isnan(logs), worst, logs)
    out = np.zeros(prior_pct.shape[1])
    for j in range(prior_pct.shape[1]):
        have = ~np.isnan(prior_pct[:, j])
        if have.sum() < 6:
            continue
        a, b = _ranks(prior_pct[have, j]), _ranks(seen[have])
        if a.std() == 0 or b.std() == 0:
            continue
        out[j] = float(np.corrcoef(a, b)[0, 1])
    return out


def _ranks(x: Any) -> Any:
    import numpy as np

    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    values, first, counts = np.unique(
        x, return_index=False, return_inverse=True, return_counts=True
    )
    del values
    sums = np.bincount(first, weights=ranks)
    return sums[first] / counts[first]  # ties share their mean rank


def match(space: Space, prior: PriorSource, family: str | None = None) -> Prior:
    """The records of ``prior`` matched to ``space`` (see the module's docstring).

    ``prior`` is a :class:`~tileauto.search.RecordedSpace`, the path of a file that
    :meth:`RecordedSpace.load` reads (or of a folder of them), a list of :class:`~tileauto.records.Trial` (or of
    ``{"config": ..., "latency_ms": ...}`` dicts), a list of any of these (some of them
    grouped as :class:`SameProblem`), or a callable returning one of these (called once
    here; it may return ``[]``). With ``family`` (the tuned call's), a recorded space of that
    family counts as the same problem too, as if given in a :class:`SameProblem`. A folder's
    regular ``*.json``/``*.json.gz`` files are read; one that does not load is dropped (in
    :attr:`Prior.dropped`, with the reason), where a file named alone raises.

    Raises:
        TypeError: ``prior`` is none of these (the message says what came).
        ValueError: a file named alone that :meth:`RecordedSpace.load` refuses.
    """
    from tileauto.search.recorded import RecordedSpace

    if callable(prior) and not isinstance(prior, type):
        prior = prior()
    out = Prior(space)
    for k, (item, same_problem) in enumerate(_tagged(prior)):
        if isinstance(item, _InFolder):  # a hint among others: one that does not load is dropped
            try:
                item = RecordedSpace.load(item.path)
            except (OSError, ValueError) as exc:  # a sub-folder, a damaged or other file
                why = _short(exc)
                out.dropped.append(why if why.startswith(str(item.path)) else f"{item.path}: {why}")
                continue
        elif isinstance(item, (str, Path)):
            try:
                item = RecordedSpace.load(item)
            except OSError as exc:  # named as the prior's, not a bare OSError
                raise ValueError(f"prior[{k}]: {item} cannot be read: {_short(exc)}") from None
        if isinstance(item, RecordedSpace):
            name = Path(item.source).name or item.device or item.kernel or f"prior[{k}]"
            src, why = _from_record(space, name, item)
        else:
            name = f"prior[{k}]"
            src, why = _from_rows(space, name, _rows(item, k))
        if src is None:
            out.dropped.append(f"{name}: {why}")
        else:
            src.same_problem = same_problem or (
                bool(family) and getattr(item, "family", "") == family
            )
            out.sources.append(src)
    return out


def _tagged(prior: Any) -> list[tuple[Any, bool]]:
    """The records of ``prior``, each with whether it came in a :class:`SameProblem`."""
    if isinstance(prior, SameProblem):
        return [(item, True) for item in _unfolded(_items(list(prior.records)))]
    out: list[tuple[Any, bool]] = []
    for item in _unfolded(_items(prior)):
        if isinstance(item, SameProblem):
            out += [(x, True) for x in _unfolded(_items(list(item.records)))]
        else:
            out.append((item, False))
    return out


def _unfolded(items: list[Any]) -> list[Any]:
    """``items`` with each folder among them replaced by its files (a folder in a list is a
    folder as well)."""
    out: list[Any] = []
    for item in items:
        out += _folder(item) if isinstance(item, (str, Path)) and Path(item).is_dir() else [item]
    return out


def _folder(path: str | Path) -> list[Any]:
    """The recorded spaces of a folder: its regular ``*.json``/``*.json.gz`` files."""
    return [
        _InFolder(p)
        for p in sorted(Path(path).iterdir())
        if p.name.endswith((".json", ".json.gz")) and p.is_file()
    ]


def _items(prior: Any) -> list[Any]:
    from tileauto.search.recorded import RecordedSpace

    if prior is None:
        return []
    if isinstance(prior, (str, Path)) and Path(prior).is_dir():  # a folder of recorded spaces
        return _folder(prior)
    if isinstance(prior, (RecordedSpace, str, Path)):
        return [prior]
    if isinstance(prior, Sequence) and prior and all(isinstance(x, (Trial, dict)) for x in prior):
        return [list(prior)]  # one record, as trials
    if isinstance(prior, Iterable) and not isinstance(prior, (bytes, dict)):
        return list(prior)
    raise TypeError(
        "prior must be a RecordedSpace, a path to a recorded space, a list of trials, a list "
        f"of these, or a callable returning one, got {type(prior).__name__} {prior!r:.80}"
    )


@dataclass(frozen=True)
class _InFolder:
    """A file of a folder given as a prior: one that does not load is dropped, not an error."""

    path: Path


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:297] + "..."


def _rows(item: Any, k: int) -> list[tuple[dict[str, Any], float | None]]:
    """A list of trials as (config, latency or None) pairs."""
    if not isinstance(item, Sequence) or isinstance(item, (str, bytes)):
        raise TypeError(
            f"prior[{k}] is {type(item).__name__} {item!r:.60}: expected a RecordedSpace, a "
            "path or a list of trials"
        )
    rows = []
    for t in item:  # a config never tried says nothing (it did not fail)
        if isinstance(t, Trial):
            if t.status is not TrialStatus.NOT_RUN:
                rows.append((dict(t.config), t.latency_ms if t.ok else None))
        elif isinstance(t, dict) and isinstance(t.get("config"), dict):
            if t.get("status") == TrialStatus.NOT_RUN.value:
                continue
            lat: Any = t.get("latency_ms")
            ok = t.get("status", "ok") == "ok" and _positive(lat)
            rows.append((dict(t["config"]), float(lat) if ok else None))
        else:
            raise TypeError(
                f"prior[{k}] holds {type(t).__name__} {t!r:.60}: expected a Trial or a dict "
                "with 'config' and 'latency_ms'"
            )
    return rows


def _positive(x: Any) -> bool:
    return (
        isinstance(x, numbers.Real)
        and not isinstance(x, bool)
        and math.isfinite(float(x))
        and float(x) > 0
    )


def _value_key(v: Any) -> Any:
    """A value as it is compared across records: numbers by value, bools apart from numbers."""
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, numbers.Real):
        return ("n", float(v))
    if isinstance(v, (list, tuple)):
        return ("t", tuple(_value_key(x) for x in v))
    return ("s", repr(v))


def _tables(space: Space) -> list[dict[Any, int]]:
    return [{_value_key(v): c for c, v in enumerate(p.values)} for p in space.params]


def _from_record(space: Space, name: str, record: Any) -> tuple[_Source | None, str]:
    """A recorded space matched by whole columns: each of its parameters' values translated
    once to the space's value positions, then every config at once."""
    import numpy as np

    theirs = {p.names: (j, p) for j, p in enumerate(record.space.params)}
    # each of the record's names: its parameter, and its place in that parameter's values
    named = {n: (k, i) for k, q in enumerate(record.space.params) for i, n in enumerate(q.names)}
    tables = _tables(space)
    shared, columns = [], []
    codes = record.space.codes(np.arange(len(record)))
    for j, p in enumerate(space.params):
        if p.names in theirs:
            k, q = theirs[p.names]
            to_ours = np.asarray(
                [tables[j].get(_value_key(v), -1) for v in q.values], dtype=np.int64
            )
            column = to_ours[codes[:, k]]
        elif all(n in named for n in p.names):  # tied on one side only: value by value
            column = _joint_column(
                record.space.params, [named[n] for n in p.names], tables[j], codes
            )
        else:
            continue
        shared.append(j)
        columns.append(column)
    if not shared:
        return None, _no_names(space, {n for p in record.space.params for n in p.names})
    ours = np.stack(columns, axis=1)
    lat = np.asarray([t.latency_ms if t.ok and t.latency_ms else math.inf for t in record.trials])
    return _collapse(space, name, shared, ours, lat)


def _joint_column(
    params: Sequence[Any], parts: list[tuple[int, int]], table: dict[Any, int], codes: Any
) -> Any:
    """One space parameter's codes for each config of a record that splits or ties its names
    otherwise (the space ties ``micro_M, micro_N``, the record has each apart, or the reverse):
    ``parts`` gives each name's record parameter and place in its values."""
    import numpy as np

    used = sorted({k for k, _ in parts})
    combos, inverse = np.unique(codes[:, used], axis=0, return_inverse=True)
    out = np.empty(len(combos), dtype=np.int64)
    for row, combo in enumerate(combos):
        chosen = {k: params[k].values[c] for k, c in zip(used, combo)}
        value = [chosen[k] if len(params[k].names) == 1 else chosen[k][i] for k, i in parts]
        out[row] = table.get(_value_key(value[0] if len(parts) == 1 else tuple(value)), -1)
    return out[np.asarray(inverse).reshape(-1)]


def _from_rows(
    space: Space, name: str, rows: list[tuple[dict[str, Any], float | None]]
) -> tuple[_Source | None, str]:
    import numpy as np

    if not rows:
        return None, "no records"
    names_in = set().union(*(r[0].keys() for r in rows))
    shared = [j for j, p in enumerate(space.params) if all(n in names_in for n in p.names)]
    if not shared:
        return None, _no_names(space, names_in)
    tables = _tables(space)
    codes, lats = [], []
    for config, latency in rows:
        row = []
        for j in shared:
            p = space.params[j]
            value = (
                config.get(p.names[0])
                if len(p.names) == 1
                else tuple(config.get(n) for n in p.names)
            )
            row.append(tables[j].get(_value_key(value), -1))
        codes.append(row)
        lats.append(latency if latency is not None else math.inf)
    return _collapse(
        space,
        name,
        shared,
        np.asarray(codes, dtype=np.int64).reshape(-1, len(shared)),
        np.asarray(lats, dtype=np.float64),
    )


def _no_names(space: Space, theirs: set[str]) -> str:
    wanted = sorted(n for p in space.params for n in p.names)
    return f"no parameter of the space (the space has {wanted}, the record {sorted(theirs)})"


def _collapse(
    space: Space, name: str, shared: list[int], codes: Any, lat: Any
) -> tuple[_Source | None, str]:
    """Percentiles among all the record's configs, kept for those whose values the space has
    (``codes`` -1 elsewhere), one per key (the best record of a key counts)."""
    import numpy as np

    passing = np.isfinite(lat)
    if len(lat) and not passing.any():
        return None, f"none of its {len(lat)} configs passed"
    pct = np.ones(len(lat))
    if passing.sum() > 1:
        pct[passing] = _ranks(lat[passing]) / (passing.sum() - 1)
    elif passing.sum() == 1:
        pct[passing] = 0.0
    keep = (codes >= 0).all(axis=1) if len(codes) else np.zeros(0, dtype=bool)
    codes, pct, failed = codes[keep], pct[keep], ~passing[keep]
    if not len(codes):
        return None, "none of its configs has values the space has"
    sizes = [len(space.params[j].values) for j in shared]
    radix = np.asarray([math.prod(sizes[i + 1 :]) for i in range(len(sizes))], dtype=np.int64)
    k = codes @ radix
    order = np.lexsort((failed, pct, k))  # a key's best record: a pass before a failure
    k, pct, failed = k[order], pct[order], failed[order]
    first = np.r_[True, k[1:] != k[:-1]]
    return _Source(name, shared, radix, k[first], pct[first], sizes, failed[first]), ""


def check_prior(prior: PriorSource, owner: str) -> None:
    """Refuse, when a strategy is made, a ``prior=`` text that is neither "auto" nor a path
    that exists, and what can never be records (a number, a dict, bytes); records and
    callables are checked when the search starts."""
    from tileauto.search.recorded import RecordedSpace

    auto = "" if owner == "replay()" else '"auto", '  # a replay has no cache prior
    if isinstance(prior, (str, Path)) and prior != "auto" and not Path(prior).exists():
        raise ValueError(
            f"{owner} prior must be {auto}None, records, a callable, or the path of a "
            f"recorded space or of a folder of them; {str(prior)!r} is not a file or folder"
        )
    for where, path in _paths_in(prior):  # in a list (or SameProblem): checked the same
        if not Path(path).exists():
            raise ValueError(
                f"{owner} prior{where} must be a recorded space (a RecordedSpace, a list of "
                f"trials) or the path of one or of a folder of them; {str(path)!r} is not a "
                "file or folder"
            )
    if (
        prior is None
        or isinstance(prior, (str, Path, RecordedSpace, SameProblem))
        or callable(prior)
        or (isinstance(prior, Iterable) and not isinstance(prior, (bytes, bytearray, dict)))
    ):
        return
    raise TypeError(
        f"{owner} prior must be {auto}None, records (a RecordedSpace, a list of trials, a "
        "list of these), a callable returning them, or the path of a recorded space or of a "
        f"folder of them; got {type(prior).__name__} {prior!r:.60}"
    )


def _paths_in(prior: Any) -> list[tuple[str, Any]]:
    """The paths a list prior (or a :class:`SameProblem`) names, each with where: ``[k]``
    or ``[k].records[i]`` (a generator is not read: it would be used up)."""
    if isinstance(prior, SameProblem):
        return [(f".records[{i}]", x) for i, x in enumerate(prior.records) if _is_path(x)]
    if not isinstance(prior, Sequence) or isinstance(prior, (str, bytes)):
        return []
    out = []
    for k, item in enumerate(prior):
        if _is_path(item):
            out.append((f"[{k}]", item))
        elif isinstance(item, SameProblem):
            out += [(f"[{k}]{w}", x) for w, x in _paths_in(item)]
    return out


def _is_path(item: Any) -> bool:
    return isinstance(item, (str, Path))


def describe_prior(prior: Any) -> str:
    """A prior in a strategy's describe() (part of the cache key): stable, short, and
    different for different records: a path by its text, a recorded space by its source (or
    kernel, device, size and optimum), a list of trials as one record, a list by its records."""
    from tileauto.search.recorded import RecordedSpace

    if prior is None or isinstance(prior, str):
        return repr(prior)
    if isinstance(prior, Path):
        return repr(str(prior))
    if isinstance(prior, RecordedSpace):
        return _describe_record(prior)
    if isinstance(prior, SameProblem):
        return f"SameProblem({describe_prior(list(prior.records))})"
    if callable(prior):
        return "callable"
    if isinstance(prior, Sequence) and prior and all(isinstance(x, (Trial, dict)) for x in prior):
        return (
            f"1 record ({len(prior)} trial{'' if len(prior) == 1 else 's'}, {_rows_digest(prior)})"
        )
    try:
        items = list(prior)
    except TypeError:
        return type(prior).__name__
    same = sum(len(p.records) for p in items if isinstance(p, SameProblem))
    count = len(items) + same - sum(isinstance(p, SameProblem) for p in items)
    head = f"{count} record{'' if count == 1 else 's'}" + (
        f", {same} of the same problem" if same else ""
    )
    if not items:
        return head
    return f"{head}: [{', '.join(describe_prior(x) for x in items)}]"


def _rows_digest(trials: Sequence[Any]) -> str:
    """16 hex digits of a list of trials' configs and latencies (or failures): other records,
    another cache key."""
    import hashlib

    from tileauto.space import config_id

    h = hashlib.blake2b(digest_size=8)
    try:
        rows = _rows(trials, 0)
    except TypeError:  # not trials after all: the text of each tells them apart
        rows = [(t, None) for t in trials]
    for config, latency in rows:
        try:
            text = config_id(config)
        except (TypeError, ValueError):  # a value JSON cannot write: its repr
            text = repr(config)
        h.update(f"{text}|{latency!r};".encode())
    return h.hexdigest()


def _describe_record(record: Any) -> str:
    """A recorded space by where it came from and a digest of its configs and trials."""
    parts = [repr(record.source)] if record.source else []
    named = (("kernel", record.kernel), ("device", record.device), ("family", record.family))
    parts += [f"{k}={v!r}" for k, v in named if v]
    parts += [f"{len(record)} configs", record.digest]
    return f"RecordedSpace({', '.join(parts)})"
