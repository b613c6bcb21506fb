"""The ``tileauto cache`` verbs: list, show, verify, clear, export and import entries.

Each reads the cache through :mod:`tileauto.cache.catalog` and prints plain text (or JSON);
a problem found is the exit code, not an exception.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tileauto.cli._base import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    format_age,
    format_size,
    settings_of,
    text_table,
)

# ``tileauto --help`` and the cache verbs import only what they use: no torch, no TVM, and
# not even ``typing`` or ``pathlib`` before a verb needs them. Type checkers treat a name
# ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

_NO_MATPLOTLIB = '--plot needs matplotlib, an optional extra: pip install "tileauto[plot]"'


def _kinds(args: argparse.Namespace) -> tuple[str, ...]:
    from tileauto.cache.entry import KINDS

    return KINDS if args.kind == "all" else (args.kind,)


def cmd_list(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog

    root = settings_of(args, reading=True).cache_dir
    entries = catalog.list_entries(root, _kinds(args))
    now = time.time()
    if args.json:
        data = [
            {
                "kind": e.kind,
                "key": e.key,
                "kernel": e.kernel,
                "module": e.module,
                "target": e.target,
                "age_s": round(now - e.created, 3),
                "size_bytes": e.size_bytes,
                "latency_ms": e.latency_ms,
                "path": str(e.path),
                "readable": e.readable,
            }
            for e in entries
        ]
        print(json.dumps(data, indent=1))
        return EXIT_OK
    if not entries:
        print(f"no entries in {root}")
        return EXIT_OK
    rows = [("KIND", "KEY", "KERNEL", "TARGET", "AGE", "SIZE", "BEST MS")]
    for e in entries:
        lat = e.latency_ms
        rows.append(
            (
                e.kind,
                e.key,
                e.label if e.readable else "(no manifest: partial or corrupt)",
                e.target if e.readable else "-",
                format_age(now - e.created),
                format_size(e.size_bytes),
                f"{lat:.4g}" if lat is not None else "-",
            )
        )
    print(text_table(rows))
    total = sum(e.size_bytes for e in entries)
    print(f"{len(entries)} entries, {format_size(total)} in {root}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog
    from tileauto.cache.entry import KIND_TUNED, read_artifact

    if args.plot is not None:  # a bad --plot is refused before the entry is shown
        _check_plot_path(args.plot)
    info = _find(args)
    manifest = info.manifest or {}
    facts = [
        ("key", info.key),
        ("kind", info.kind),
        ("path", str(info.path)),
        ("kernel", info.label),
        ("target", str(manifest.get("target", "?"))),
        ("device", json.dumps(manifest.get("device"), sort_keys=True)),
        (
            "versions",
            f"tileauto {manifest.get('tileauto')}, TVM {manifest.get('tvm')}, format {manifest.get('format')}",
        ),
        ("created", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.created))),
        ("size", format_size(info.size_bytes)),
    ]
    problem = catalog.verify_entry(info)
    facts.append(("status", "ok" if problem is None else problem))
    try:
        artifact = read_artifact(info.path)
        sig = ", ".join(f"{p.name}: {list(p.shape)} {p.dtype}" for p in artifact.params)
        facts.append(
            ("signature", f"{artifact.func_name}({sig}), out_idx={list(artifact.out_idx)}")
        )
    except (OSError, ValueError, KeyError, TypeError):
        artifact = None
    if info.kind == KIND_TUNED:
        facts.extend(_tuned_facts(info))
    elif artifact is not None:
        facts.append(("config", json.dumps(artifact.config, sort_keys=True)))
    width = max(len(k) for k, _ in facts)
    for k, v in facts:
        print(f"{k.ljust(width)}  {v}")
    if info.kind == KIND_TUNED:
        table = _trial_table(info)
        if table:
            print()
            print(table)
    if args.plot is not None:
        print(f"plot: {_plot(info, args.plot)}")
    return EXIT_OK if problem is None else EXIT_FAIL


def _check_plot_path(path: str) -> None:
    """Refuse a ``--plot`` image path that cannot be written: an unknown suffix, a missing
    folder."""
    from tileauto.report.plot import check_image_path

    try:
        image = check_image_path(path)
    except ValueError as exc:
        raise CommandError(f"--plot: {exc}", EXIT_USAGE) from None
    folder = image.parent
    if not folder.is_dir():
        raise CommandError(
            f"--plot: {path!r} is in {str(folder)!r}, which is not a folder; "
            "expected an image path in an existing folder",
            EXIT_USAGE,
        )


def _format_config(config: dict[str, Any]) -> str:
    """JSON, sorted; a config with tuples (the literal ``best_config.json`` keeps) as the
    Python dict the tuning returned, so that a tuple does not read as a list."""
    if json.loads(json.dumps(config)) == config:
        return json.dumps(config, sort_keys=True)
    return repr(dict(sorted(config.items())))


def _tuned_facts(info: Any) -> list[tuple[str, str]]:
    from tileauto.cache import catalog
    from tileauto.cache.entry import config_of
    from tileauto.errors import CacheError

    out = []
    try:
        config = config_of(catalog.read_record(info, "best_config.json"))
        out.append(("best config", _format_config(config)))
        lat = catalog.read_record(info, "latency.json")
        out.append(("best latency", f"{lat['latency_ms']:.4g} ms"))
        if lat.get("default_latency_ms"):
            out.append(("default latency", f"{lat['default_latency_ms']:.4g} ms"))
        if lat.get("ref_latency_ms"):
            out.append(("reference latency", f"{lat['ref_latency_ms']:.4g} ms"))
        search = catalog.read_record(info, "trials.json").get("search")
        if isinstance(search, dict):  # entries stored before it was kept have none
            out.extend(_search_facts(search))
    except CacheError as exc:  # edited records are not shown as facts
        out.append(("records", str(exc)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        out.append(("records", f"unreadable ({exc})"))
    return out


def _search_facts(search: dict[str, Any]) -> list[tuple[str, str]]:
    """How the search that stored the entry ran: its strategy, why it stopped, what it
    measured, and what became of its prior (the records used, those dropped and why)."""
    counts = f"{search.get('measured')} measured"
    if search.get("never_tried") is not None:
        counts += f", {search['never_tried']:,} never tried"
    out = [("search", f"{search.get('strategy')}: {search.get('stop_reason')}, {counts}")]
    prior = search.get("prior")
    if isinstance(prior, dict):
        used, dropped = prior.get("matched") or [], prior.get("dropped") or []
        told = f"{len(used)} record(s) used, {len(dropped)} dropped" if used or dropped else ""
        out.append(("prior", told or "none found (no records of the kernel elsewhere)"))
        out.extend(("", f"dropped: {why}") for why in dropped[:5])
    return out


def _trial_table(info: Any) -> str | None:
    from tileauto.cache import catalog
    from tileauto.cache.entry import config_of
    from tileauto.errors import CacheError
    from tileauto.report.table import format_table
    from tileauto.result._values import with_own_values

    try:
        records = catalog.read_trials(info)
        best_config = config_of(catalog.read_record(info, "best_config.json"))
    except (CacheError, OSError, ValueError, KeyError, TypeError):
        return None
    trials, default = with_own_values(records.trials, records.default, best_config)
    return format_table(
        list(trials),
        records.best_index,
        default,
        title=f"{len(records.trials)} configs, tuned in {records.tuning_s:.1f} s",
    )


def _plot(info: Any, path: str) -> Path:
    """Draw the entry's trials into the image ``path`` (matplotlib: the ``plot`` extra)."""
    from tileauto.cache import catalog

    records = catalog.read_trials(info)
    try:
        from tileauto.report.plot import plot_trials
    except ImportError as exc:
        raise CommandError(_missing_matplotlib(exc)) from None
    ok = sum(t.ok for t in records.trials)
    title = f"{info.kernel}, key {info.key[:8]}: {len(records.trials)} configs, {ok} passed"
    try:
        return plot_trials(
            records.trials,
            path,
            best_index=records.best_index,
            default=records.default,
            title=title,
        )
    except ImportError as exc:
        raise CommandError(_missing_matplotlib(exc)) from None
    except ValueError as exc:  # an image format it cannot write, named by the suffix
        raise CommandError(f"--plot: {exc}", EXIT_USAGE) from None


def _missing_matplotlib(exc: ImportError) -> str:
    cause = exc.__cause__ if isinstance(exc.__cause__, ImportError) else exc
    return f"{_NO_MATPLOTLIB} ({cause})"


def cmd_verify(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog, disk

    root = settings_of(args, reading=True).cache_dir
    # A folder's problem (a root made group-writable by umask 002) is reported once, with
    # its fix, and is not each entry's: the entries are checked without it, and nothing is
    # deleted in an unsafe folder (every entry in it used to be deleted, intact or not).
    unsafe = catalog.folder_problems(root, _kinds(args))
    for folder, reason in unsafe:
        print(f"UNSAFE   {reason}: {_folder_fix(folder, reason)}")
    entries = catalog.list_entries(root, _kinds(args))
    bad = newer = 0
    for e in entries:
        problem = catalog.verify_entry(e, check_folders=False)
        if problem is None:
            if args.verbose:
                print(f"ok       {e.kind}/{e.key}")
            continue
        newer_one = problem.startswith(("stale:", "unknown format"))
        why = catalog.written_by_newer(e) if newer_one else None
        if why is not None:  # intact, and a newer install sharing this folder uses it
            newer += 1
            print(f"newer    {e.kind}/{e.key}: {why}; not used here, left alone")
            continue
        bad += 1
        action = ""
        if args.delete and not unsafe:
            disk.remove_tree(e.path)
            action = " (deleted)"
        print(f"BAD      {e.kind}/{e.key}: {problem}{action}")
    print(
        f"{len(entries)} entries checked, {bad} bad"
        + (f", {newer} of a newer install (left alone)" if newer else "")
        + (f" in {root}" if entries else f"; {root} is empty")
    )
    if unsafe:
        kept = "; nothing was deleted: fix the folder, then run verify --delete again"
        print(
            f"{len(unsafe)} unsafe {'folder' if len(unsafe) == 1 else 'folders'}: until fixed, "
            "no entry in it is loaded or written (each entry above was checked without it)"
            + (kept if args.delete else "")
        )
    return EXIT_FAIL if bad or unsafe else EXIT_OK  # deleted or not, a bad entry is news


def _folder_fix(folder: Path, reason: str) -> str:
    """How to make a cache folder safe again, for the reason ``folder_problem`` gave."""
    import shlex

    if "writable by group or others" in reason:
        return f"fix it with `chmod 700 {shlex.quote(str(folder))}`"
    return (
        "use a cache folder of your own (--cache-dir, TILEAUTO_CACHE_DIR), or make this one "
        f"yours and private (`chown`, `chmod 700 {shlex.quote(str(folder))}`)"
    )


def cmd_clear(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog

    settings = settings_of(args, reading=True)
    if args.logs:
        return _clear_logs(settings, args)
    root = settings.cache_dir
    if args.dry_run:
        now = time.time()
        plan = catalog.clear_plan(root, args.older_than, _kinds(args))
        entries = [item.entry for item in plan if item.entry is not None]
        for e in entries:
            print(f"would delete {e.kind}/{e.key} ({e.kernel}, {format_age(now - e.created)} old)")
        others = [item for item in plan if item.entry is None]
        for item in others:  # measurements and memos, by their place in the cache
            print(f"would delete {item.path.relative_to(root)} ({format_size(item.size_bytes)})")
        print(
            f"{len(entries)} entries and {len(others)} measurement folders and memos, "
            f"{format_size(sum(item.size_bytes for item in plan))}"
        )
        _clear_leftovers(settings.staging_dir, dry_run=True)
        return EXIT_OK
    count, size = catalog.clear(root, args.older_than, _kinds(args))
    what = f" older than {format_age(args.older_than)}" if args.older_than is not None else ""
    print(f"deleted {count} entries{what} ({format_size(size)}) from {root}")
    _clear_leftovers(settings.staging_dir, dry_run=False)
    return EXIT_OK


def _clear_leftovers(staging: Path, *, dry_run: bool) -> None:
    """Remove (or list) what killed runs left in the staging dir, and say so."""
    from tileauto.cache import scratch

    done = scratch.remove_leftovers(staging, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for item in done.removed:
        print(f"{verb} {item.path} ({format_size(item.size_bytes)}): {item.why}")
    line = (
        f"{verb} {len(done.removed)} leftovers of ended runs "
        f"({format_size(done.size_bytes)}) from {staging}"
    )
    if done.in_use:
        line += f"; kept {len(done.in_use)} in use by running processes"
    print(line)


def _clear_logs(settings: Any, args: argparse.Namespace) -> int:
    from tileauto.cache import hygiene

    logs_dir = settings.logs_dir
    failed: list[tuple[hygiene.LogFile, OSError]] = []
    deleted, kept = hygiene.clear_logs(
        logs_dir, args.older_than, dry_run=args.dry_run, failed=failed
    )
    verb = "would delete" if args.dry_run else "deleted"
    if args.dry_run:
        for item in deleted:
            print(f"{verb} {item.path} ({format_size(item.size_bytes)})")
    what = f" older than {format_age(args.older_than)}" if args.older_than is not None else ""
    size = sum(item.size_bytes for item in deleted)
    line = f"{verb} {len(deleted)} logs{what} ({format_size(size)}) from {logs_dir}"
    if kept:
        line += f"; kept {len(kept)} in use"
    print(line)
    if failed:  # as `clear` does for entries: what it did, then why it failed
        raise CommandError(
            f"{hygiene.failed_logs_message(failed)} (check that you may write {logs_dir} "
            "and its workers/ folder)"
        )
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog

    if args.dir is None and args.trials is None:
        raise CommandError("give DIR (to copy the entry), --trials FILE, or both", EXIT_USAGE)
    info = _find(args)
    from pathlib import Path

    # Everything is checked before anything is written: the trials (the entry verifies),
    # FILE (new) and DIR (new or empty). DIR is written first, so that FILE may be inside it
    # (it used to be written first and then made DIR "not empty"); it is not part of the
    # exported entry's manifest, and `cache import` leaves it out.
    text = None
    trials = None
    if args.trials is not None:
        text = json.dumps(catalog.trials_document(info), indent=1, sort_keys=True) + "\n"
        if args.trials != "-":
            trials = Path(args.trials).expanduser()
            _check_new_file(trials)
            if args.dir is not None:
                _check_not_in_entry(trials, Path(args.dir).expanduser(), info)
    if args.dir is not None:
        dest = catalog.export_entry(info, Path(args.dir))
        print(f"exported {info.kind}/{info.key} ({info.kernel}) to {dest}{_open_to_others(dest)}")
    if text is not None:
        if trials is None:
            sys.stdout.write(text)
        else:
            _write_trials(trials, text)
            print(f"wrote the trials of {info.kind}/{info.key} ({info.kernel}) to {args.trials}")
    return EXIT_OK


def _open_to_others(dest: Path) -> str:
    """A warning for an export into an empty folder others may write (it keeps its mode: a
    shared ``mkdir -m 2770`` one), which ``cache import`` and ``load_from_disk`` refuse."""
    import stat

    mode = stat.S_IMODE(dest.stat().st_mode)
    if not mode & (stat.S_IWGRP | stat.S_IWOTH):
        return ""
    return (
        f" (warning: the folder is writable by group or others (mode {mode:o}), so `cache "
        f"import` and load_from_disk refuse it; `chmod go-w {dest}` lets them read it)"
    )


def _check_not_in_entry(trials: Path, dest: Path, info: Any) -> None:
    """``--trials DIR/trials.json``: a FILE inside DIR must not be one of the exported
    entry's own files (its ``trials.json`` holds the entry's records) or folders
    (``kernel``), nor inside one of its files, checked up front; beside them
    (``DIR/kernel/trials-export.json`` too) it may be."""
    from pathlib import PurePosixPath

    from tileauto.cache import disk

    if dest.resolve().is_relative_to(trials.resolve()):  # DIR would be written in FILE's place
        what = "DIR itself" if trials.resolve() == dest.resolve() else "a folder above DIR"
        raise CommandError(
            f"--trials {trials} is {what} ({dest}): expected a file to write, "
            f"e.g. {dest / 'trials-export.json'}",
            EXIT_USAGE,
        )
    try:
        rel = trials.resolve().relative_to(dest.resolve())
    except ValueError:  # not inside DIR
        return
    listed = (info.manifest or {}).get("files")
    files = {disk.MANIFEST} | {str(f) for f in (listed if isinstance(listed, dict) else {})}
    folders = {p.as_posix() for f in files for p in PurePosixPath(f).parents if p.name}
    name = rel.as_posix()
    if name in files or name in folders:  # the export writes it: FILE would be refused later
        what = "a file" if name in files else "a folder"
        raise CommandError(
            f"--trials {trials} is {what} of the exported entry itself ({name}); "
            f"give another name, e.g. {dest / 'trials-export.json'}",
            EXIT_USAGE,
        )
    inside = next((p.as_posix() for p in rel.parents if p.as_posix() in files), None)
    if inside is not None:  # DIR/trials.json/t.json: no folder can be made there
        raise CommandError(
            f"--trials {trials} is inside {inside}, a file of the exported entry: expected "
            f"a file in a folder, e.g. {dest / 'trials-export.json'}",
            EXIT_USAGE,
        )


def _check_new_file(path: Path) -> None:
    """``--trials FILE`` must be new: an existing file (or a link, even one to nothing) is
    refused, as a ``DIR`` that is not empty is; nothing is replaced or written through."""
    import os

    if path.is_dir() and not path.is_symlink():
        raise CommandError(f"--trials {path} is a folder: expected a file to write")
    if path.is_symlink():
        raise CommandError(
            f"--trials {path} is a symbolic link: give a new file (it is not written through)"
        )
    if os.path.lexists(path):
        raise CommandError(f"--trials {path} exists: give a new file, or delete it first")
    above = path.parent
    while not os.path.lexists(above) and above != above.parent:
        above = above.parent
    if not above.is_dir():  # its folder cannot be made: said before anything is written
        raise CommandError(
            f"--trials {path}: {above} is not a folder: expected a file in a folder", EXIT_USAGE
        )


def _write_trials(path: Path, text: str) -> None:
    """``--trials FILE``: written to a temporary file next to it, then put in place in one
    step, never over a file there (a failure half-way leaves no half-written FILE); its
    folder made as ``DIR``'s is; a failure named. A FILE named ``*.gz`` is gzipped, as its name
    says (the records are shared as ``.json.gz``)."""
    import contextlib
    import gzip
    import os
    import tempfile

    _check_new_file(path)
    data = text.encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with open(fd, "wb") as f:
            umask = os.umask(0o022)
            os.umask(umask)
            os.fchmod(f.fileno(), 0o666 & ~umask)  # as a plain write makes it, not 0600
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # fails if FILE appeared meanwhile: nothing is replaced
        except FileExistsError:
            raise CommandError(
                f"--trials {path} exists: give a new file, or delete it first"
            ) from None
        except OSError:  # no hard links here (some file systems): a rename, checked before
            _check_new_file(path)
            os.replace(tmp, path)
            tmp = None
    except OSError as exc:
        raise CommandError(f"--trials {path}: cannot write it ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def cmd_prior(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tileauto.cache.priors import export_prior
    from tileauto.errors import CacheError

    try:
        written = export_prior(
            settings_of(args, reading=True).cache_dir, args.kernel, Path(args.dir)
        )
    except CacheError as exc:
        raise CommandError(str(exc), EXIT_FAIL) from None
    for path in written:
        print(path)
    print(
        f"{len(written)} entries of {args.kernel} written to {args.dir}: pass it as "
        f"prior={args.dir!r} on another machine"
    )
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog, folders

    settings = settings_of(args)
    folders.make_private_dir(settings.cache_dir)
    from pathlib import Path

    refused: list[str] = []

    def refuse(path: Path, why: str) -> None:  # the others are imported still
        print(f"not imported {path}: {why}")
        refused.append(str(path))

    done = catalog.import_entries(
        Path(args.dir), settings.cache_dir, settings.staging_dir, on_refused=refuse
    )
    for kind, key, note in done:
        print(f"imported {kind}/{key}" + (f" (warning: {note})" if note else ""))
    if refused:
        raise CommandError(
            f"{len(refused)} of {len(refused) + len(done)} entries in {args.dir} not imported "
            "(each is named above, with why)"
        )
    return EXIT_OK


def _find(args: argparse.Namespace) -> Any:
    from tileauto.cache import catalog

    if not str(args.key).strip():  # an unset shell variable: a usage error, as a missing KEY
        raise CommandError(
            f"{args.verb}: expected KEY (the key, or a unique prefix of it), got an empty "
            "one; `tileauto cache list` shows the keys",
            EXIT_USAGE,
        )
    return catalog.find_entry(settings_of(args, reading=True).cache_dir, args.key)
