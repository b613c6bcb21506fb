"""A search's prior from the disk cache: the trials of a kernel tuned before, elsewhere.

Elsewhere is other targets, devices or problem sizes: the guided search starts from what
ranked well there. The same call measured on other targets or devices (its *family*) is read
first: on another device it is the best prior there is.

Read-only: entries are found with the catalog's readers (:func:`list_entries`,
:func:`read_trials`), which check every record against its manifest; an entry that does not
verify is skipped, never an error. Entries match by the kernel's name (the factory's qualname)
and module (:func:`~tileauto.cache.key.factory_module`: two files' ``gemm`` factories are two
kernels); an entry stored before its module was recorded matches by name alone. The search then matches
their configs to its space by parameter name and value, and trusts each entry only as far as
it ranks the new target's measurements alike.

``tileauto cache prior KERNEL DIR`` (:func:`export_prior`) writes one trial export
(``tileauto-trials/1``, gzipped) per tuned entry of ``KERNEL`` (a name, or ``MODULE:NAME``)
into ``DIR``: copy it to another machine and pass it as ``prior="DIR"`` (or give the files to
``RecordedSpace.load``).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from tileauto.cache.catalog import EntryInfo, list_entries, read_trials, trials_document
from tileauto.cache.entry import KIND_TUNED
from tileauto.errors import CacheError
from tileauto.records import Trial, TrialStatus

MAX_ENTRIES = 16  # the newest entries of a kernel read as a prior, at most


def _of_module(info: EntryInfo, module: str | None) -> bool:
    return module is None or info.module is None or info.module == module


def kernel_entries(root: Path, kernel: str, module: str | None = None) -> list[EntryInfo]:
    """The tuned entries of ``kernel`` under ``root``, newest first (unreadable ones left out);
    with ``module``, those of that module (and those that do not record theirs)."""
    found = [
        e
        for e in list_entries(Path(root), (KIND_TUNED,))
        if e.readable and e.kernel == kernel and _of_module(e, module)
    ]
    return sorted(found, key=lambda e: -e.created)


def prior_groups(
    root: Path,
    kernel: str,
    *,
    module: str | None = None,
    family: str | None = None,
    limit: int = MAX_ENTRIES,
) -> tuple[list[list[Trial]], list[list[Trial]]]:
    """The measured trials of each tuned entry of ``kernel`` (of ``module``, if given; at most
    ``limit`` entries; entries that do not verify or hold no passing trial are skipped), in
    two groups: those of ``family`` (the same call, measured on other targets or devices),
    and the others (other calls: other problem sizes), newest first.

    The family's entries are read first, so that other problem sizes tuned since never crowd
    them out of the ``limit``."""
    entries = kernel_entries(root, kernel, module)
    if family is not None:  # a stable sort: newest first within each group
        entries.sort(key=lambda e: e.family != family)
    same: list[list[Trial]] = []
    others: list[list[Trial]] = []
    for info in entries:
        if len(same) + len(others) >= limit:
            break
        try:
            trials = [t for t in read_trials(info).trials if t.status is not TrialStatus.NOT_RUN]
        except CacheError:
            continue
        if any(t.ok for t in trials):
            (same if family is not None and info.family == family else others).append(trials)
    return same, others


def cache_prior(
    root: Path, kernel: str, module: str | None = None, family: str | None = None
) -> Callable[[], tuple[list[list[Trial]], list[list[Trial]]]]:
    """A prior source for a strategy's ``use_prior``, read when the search starts (a search
    that never needs it, exhaustive on a small space, never reads the cache): the trials of
    the same call elsewhere, and of the kernel's other calls (:func:`prior_groups`)."""

    def read() -> tuple[list[list[Trial]], list[list[Trial]]]:
        try:
            return prior_groups(root, kernel, module=module, family=family)
        except (CacheError, OSError, ValueError):  # a prior is a hint: no cache, no hint
            return [], []

    return read


def export_prior(root: Path, kernel: str, out: Path) -> list[Path]:
    """Write each tuned entry of ``kernel`` as a gzipped trial export into the folder ``out``.

    ``kernel`` is the factory's name, or ``MODULE:NAME`` for that module's alone. A name that
    entries of several modules share exports them all, and says so on stderr.

    An entry that cannot be written (one that does not verify) is skipped and named on
    stderr; the others are written.

    Raises:
        CacheError: no tuned entry of ``kernel`` is in the cache (the message lists the
            kernels that are), or none of them could be written (each was skipped).
    """
    module, _, name = kernel.rpartition(":")  # MODULE:NAME, or NAME for every module's
    entries = kernel_entries(root, name, module or None)
    if not entries:
        known = sorted({e.label for e in list_entries(Path(root), (KIND_TUNED,)) if e.readable})
        raise CacheError(
            f"no tuned entry of kernel {kernel!r} in {root}; the cache has tuned entries of "
            f"{known or 'no kernel'}"
        )
    modules = sorted({e.module for e in entries if e.module})
    if not module and len(modules) > 1:
        print(
            f"note: {len(modules)} modules define a kernel {name!r} ({', '.join(modules)}): all "
            f"are written; name one as MODULE:{name} to write its entries alone",
            file=sys.stderr,
        )
    if out.exists() and not out.is_dir():
        raise CacheError(f"{out} is a file: expected a folder to write the prior into")
    made = not os.path.lexists(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheError(f"cannot make the folder {out}: {exc.strerror or exc}") from None
    written = []
    skipped: list[tuple[EntryInfo, CacheError]] = []
    for info in entries:
        try:
            document = trials_document(info)
        except CacheError as exc:
            print(f"skipped {info.key}: {exc}", file=sys.stderr)
            skipped.append((info, exc))
            continue
        path = out / f"{name}-{info.key[:12]}.json.gz"
        with gzip.open(path, "wt", encoding="utf-8") as file:
            json.dump(document, file)
        written.append(path)
    if not written:  # every entry skipped: no prior at all, not "0 entries written"
        if made:  # the folder made for it, empty: not left behind
            with contextlib.suppress(OSError):
                out.rmdir()
        first = skipped[0][1] if skipped else "none was read"
        raise CacheError(
            f"none of the {len(entries)} tuned entries of {kernel!r} could be written to "
            f"{out}: each was skipped, as named above (the first: {first})"
        )
    return written
