"""The ``tileauto`` command: inspect and manage the disk cache, show the effective settings.

    tileauto cache list [--kind K] [--json]     key, kernel, target, age, size, best latency
    tileauto cache show KEY [--plot IMG]        one entry: facts, the trial table, a picture
    tileauto cache verify [--delete]            hash check of every entry
    tileauto cache clear [--older-than AGE]     delete entries (all, or older than AGE) and
                                                what killed runs left in the staging dir
    tileauto cache clear --logs                 delete the logs no running process writes
    tileauto cache export KEY DIR               copy one entry to DIR (to ship it)
    tileauto cache export KEY --trials FILE     write its trials as JSON (tileauto-trials/1)
    tileauto cache import DIR                   copy an exported entry (or a folder of them) in
    tileauto env                                every TILEAUTO_* setting, as in effect now

Exit codes: 0 success, 1 the operation failed or found problems, 2 a usage error (bad
arguments or a bad ``TILEAUTO_*`` value). ``python -m tileauto`` is the same command.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

# ``tileauto --help`` and the cache verbs import only what they use: no torch, no TVM, and
# not even ``typing`` or ``pathlib`` before a verb needs them. Type checkers treat a name
# ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Any

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
_NO_MATPLOTLIB = '--plot needs matplotlib, an optional extra: pip install "tileauto[plot]"'
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class _Failure(Exception):
    """An error the command reports in one line, with an exit code."""

    def __init__(self, message: str, code: int = EXIT_FAIL) -> None:
        super().__init__(message)
        self.code = code


def parse_age(text: str) -> float:
    """``"30m"``, ``"12h"``, ``"7d"``, ``"2w"`` or plain seconds, in seconds."""
    m = _AGE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: use a number with s, m, h, d or w (e.g. 7d, 12h, 30m)"
        )
    return float(m.group(1)) * _AGE_UNITS[m.group(2)]


def format_age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def format_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


# -- commands -----------------------------------------------------------------------------------
def _settings(args: argparse.Namespace) -> Any:
    from tileauto.errors import SettingsError
    from tileauto.settings import Settings

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        raise _Failure(str(exc), EXIT_USAGE) from None
    if getattr(args, "cache_dir", None):
        import dataclasses
        from pathlib import Path

        settings = dataclasses.replace(settings, cache_dir=Path(args.cache_dir).expanduser())
    return settings


def _kinds(args: argparse.Namespace) -> tuple[str, ...]:
    from tileauto.cache.entry import KINDS

    return KINDS if args.kind == "all" else (args.kind,)


def cmd_list(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog

    root = _settings(args).cache_dir
    entries = catalog.list_entries(root, _kinds(args))
    now = time.time()
    if args.json:
        data = [
            {
                "kind": e.kind,
                "key": e.key,
                "kernel": e.kernel,
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
                e.kernel if e.readable else "(no manifest: partial or corrupt)",
                e.target if e.readable else "-",
                format_age(now - e.created),
                format_size(e.size_bytes),
                f"{lat:.4g}" if lat is not None else "-",
            )
        )
    print(_table(rows))
    total = sum(e.size_bytes for e in entries)
    print(f"{len(entries)} entries, {format_size(total)} in {root}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog
    from tileauto.cache.entry import KIND_TUNED, read_artifact

    info = _find(args)
    manifest = info.manifest or {}
    facts = [
        ("key", info.key),
        ("kind", info.kind),
        ("path", str(info.path)),
        ("kernel", info.kernel),
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


def _tuned_facts(info: Any) -> list[tuple[str, str]]:
    from tileauto.cache import catalog
    from tileauto.errors import CacheError

    out = []
    try:
        config = catalog.read_record(info, "best_config.json")["config"]
        out.append(("best config", json.dumps(config, sort_keys=True)))
        lat = catalog.read_record(info, "latency.json")
        out.append(("best latency", f"{lat['latency_ms']:.4g} ms"))
        if lat.get("default_latency_ms"):
            out.append(("default latency", f"{lat['default_latency_ms']:.4g} ms"))
        if lat.get("ref_latency_ms"):
            out.append(("reference latency", f"{lat['ref_latency_ms']:.4g} ms"))
    except CacheError as exc:  # edited records are not shown as facts
        out.append(("records", str(exc)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        out.append(("records", f"unreadable ({exc})"))
    return out


def _trial_table(info: Any) -> str | None:
    from tileauto.cache import catalog
    from tileauto.errors import CacheError
    from tileauto.report.table import format_table

    try:
        records = catalog.read_trials(info)
    except CacheError:
        return None
    return format_table(
        list(records.trials),
        records.best_index,
        records.default,
        title=f"{len(records.trials)} configs, tuned in {records.tuning_s:.1f} s",
    )


def _plot(info: Any, path: str) -> Path:
    """Draw the entry's trials into the image ``path`` (matplotlib: the ``plot`` extra)."""
    from tileauto.cache import catalog

    records = catalog.read_trials(info)
    try:
        from tileauto.report.plot import plot_trials
    except ImportError as exc:
        raise _Failure(_missing_matplotlib(exc)) from None
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
        raise _Failure(_missing_matplotlib(exc)) from None
    except ValueError as exc:  # an image format it cannot write, named by the suffix
        raise _Failure(f"--plot: {exc}", EXIT_USAGE) from None


def _missing_matplotlib(exc: ImportError) -> str:
    cause = exc.__cause__ if isinstance(exc.__cause__, ImportError) else exc
    return f"{_NO_MATPLOTLIB} ({cause})"


def cmd_verify(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog, disk

    root = _settings(args).cache_dir
    entries = catalog.list_entries(root, _kinds(args))
    bad = 0
    for e in entries:
        problem = catalog.verify_entry(e)
        if problem is None:
            if args.verbose:
                print(f"ok       {e.kind}/{e.key}")
            continue
        bad += 1
        action = ""
        if args.delete:
            disk.remove_tree(e.path)
            action = " (deleted)"
        print(f"BAD      {e.kind}/{e.key}: {problem}{action}")
    print(
        f"{len(entries)} entries checked, {bad} bad"
        + (f" in {root}" if entries else f"; {root} is empty")
    )
    return EXIT_FAIL if bad and not args.delete else EXIT_OK


def cmd_clear(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog

    settings = _settings(args)
    if args.logs:
        return _clear_logs(settings, args)
    root = settings.cache_dir
    if args.dry_run:
        now = time.time()
        chosen = [
            e
            for e in catalog.list_entries(root, _kinds(args))
            if args.older_than is None or now - e.created >= args.older_than
        ]
        for e in chosen:
            print(f"would delete {e.kind}/{e.key} ({e.kernel}, {format_age(now - e.created)} old)")
        print(f"{len(chosen)} entries, {format_size(sum(e.size_bytes for e in chosen))}")
        _clear_leftovers(settings.staging_dir, dry_run=True)
        return EXIT_OK
    count, size = catalog.clear(root, args.older_than, _kinds(args))
    what = f" older than {format_age(args.older_than)}" if args.older_than is not None else ""
    print(f"deleted {count} entries{what} ({format_size(size)}) from {root}")
    _clear_leftovers(settings.staging_dir, dry_run=False)
    return EXIT_OK


def _clear_leftovers(staging: Path, *, dry_run: bool) -> None:
    """Remove (or list) what killed runs left in the staging dir, and say so."""
    from tileauto.cache import hygiene

    done = hygiene.remove_leftovers(staging, dry_run=dry_run)
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
    deleted, kept = hygiene.clear_logs(logs_dir, args.older_than, dry_run=args.dry_run)
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
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog

    if args.dir is None and args.trials is None:
        raise _Failure("give DIR (to copy the entry), --trials FILE, or both", EXIT_USAGE)
    info = _find(args)
    from pathlib import Path

    if args.trials is not None:
        text = json.dumps(catalog.trials_document(info), indent=1, sort_keys=True) + "\n"
        if args.trials == "-":
            sys.stdout.write(text)
        else:
            Path(args.trials).expanduser().write_text(text)
            print(f"wrote the trials of {info.kind}/{info.key} ({info.kernel}) to {args.trials}")
    if args.dir is not None:
        dest = catalog.export_entry(info, Path(args.dir))
        print(f"exported {info.kind}/{info.key} ({info.kernel}) to {dest}")
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from tileauto.cache import catalog, disk

    settings = _settings(args)
    disk.make_private_dir(settings.cache_dir)
    from pathlib import Path

    done = catalog.import_entries(Path(args.dir), settings.cache_dir, settings.staging_dir)
    for kind, key, note in done:
        print(f"imported {kind}/{key}" + (f" (warning: {note})" if note else ""))
    return EXIT_OK


def cmd_env(args: argparse.Namespace) -> int:
    from tileauto.cache.key import versions

    settings = _settings(args)
    for name, value in settings.describe().items():
        print(f"{name}={value}")
    v = versions()
    print()
    print(f"# staging dir: {settings.staging_dir}")
    print(f"# logs dir: {settings.logs_dir}")
    print(f"# tuning cache: {'on' if settings.tuning_cache_enabled else 'off'}")
    print(f"# kernel cache: {'on' if settings.kernel_cache_enabled else 'off'}")
    print(
        f"# versions: tileauto {v['tileauto']}, TVM {v['tvm']}, cache format {v['format']}, Python {sys.version.split()[0]}"
    )
    return EXIT_OK


def _find(args: argparse.Namespace) -> Any:
    from tileauto.cache import catalog

    return catalog.find_entry(_settings(args).cache_dir, args.key)


# -- parser -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tileauto",
        description="tileauto: inspect and manage the disk cache of tuned and compiled kernels.",
        epilog="Exit codes: 0 success, 1 failure or problems found, 2 usage error.",
    )
    parser.add_argument("--version", action="store_true", help="print the tileauto version")
    cache_dir_help = "cache root (default: TILEAUTO_CACHE_DIR or ~/.tileauto/cache)"
    # accepted before the command, after it, or after the verb; the last one given wins
    parser.add_argument("--cache-dir", default=None, help=cache_dir_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    cache = sub.add_parser(
        "cache", help="list, show, verify, clear, export or import cache entries"
    )
    cache.add_argument("--cache-dir", default=argparse.SUPPRESS, help=cache_dir_help)
    cache_sub = cache.add_subparsers(dest="verb", metavar="VERB")

    def add(name: str, help_text: str, fn: Any) -> argparse.ArgumentParser:
        p = cache_sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--cache-dir", default=argparse.SUPPRESS, help=cache_dir_help)
        p.set_defaults(func=fn)
        return p

    p = add("list", "list entries: key, kernel, target, age, size, best latency", cmd_list)
    p.add_argument("--kind", choices=("all", "autotuner", "kernels"), default="all")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p = add("show", "show one entry: its facts and the table of every config's trial", cmd_show)
    p.add_argument("key", metavar="KEY", help="the key, or a unique prefix of it")
    p.add_argument(
        "--plot",
        metavar="IMG",
        help='also draw the trials into IMG (.png, .svg or .pdf; needs pip install "tileauto[plot]")',
    )
    p = add(
        "verify",
        "check the sha256 of every file of every entry, ownership and permissions",
        cmd_verify,
    )
    p.add_argument("--kind", choices=("all", "autotuner", "kernels"), default="all")
    p.add_argument("--delete", action="store_true", help="delete the entries that fail")
    p.add_argument("-v", "--verbose", action="store_true", help="also list the entries that pass")
    p = add(
        "clear",
        "delete entries (all of them, or those older than --older-than) and what killed runs "
        "left in the staging dir; with --logs, delete the logs instead",
        cmd_clear,
    )
    p.add_argument(
        "--older-than",
        type=parse_age,
        metavar="AGE",
        help="only entries (or logs) older than AGE (e.g. 7d, 12h, 30m, 90s)",
    )
    p.add_argument("--kind", choices=("all", "autotuner", "kernels"), default="all")
    p.add_argument(
        "--logs",
        action="store_true",
        help="delete the tuning and worker logs no running process writes (entries are kept)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted; delete nothing"
    )
    p = add(
        "export",
        "copy one entry to DIR, a new or empty folder, to ship it; or write its trials as JSON",
        cmd_export,
    )
    p.add_argument("key", metavar="KEY", help="the key, or a unique prefix of it")
    p.add_argument("dir", metavar="DIR", nargs="?", help="destination folder (created)")
    p.add_argument(
        "--trials",
        metavar="FILE",
        help='write the trials of a tuned entry to FILE as JSON ("format": "tileauto-trials/1"; '
        "- for stdout)",
    )
    p = add(
        "import", "copy an exported entry, or every entry in a folder, into the cache", cmd_import
    )
    p.add_argument("dir", metavar="DIR", help="an exported entry, or a folder of them")
    cache.set_defaults(func=None, parser=cache)

    env = sub.add_parser(
        "env",
        help="print every TILEAUTO_* setting as in effect now",
        description="print every TILEAUTO_* setting as in effect now",
    )
    env.set_defaults(func=cmd_env)
    parser.set_defaults(func=None, parser=parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        # the package this module belongs to is loaded; no import edge back to its root
        print(f"tileauto {sys.modules['tileauto'].__version__}")
        return EXIT_OK
    if args.func is None:
        getattr(args, "parser", parser).print_help(sys.stderr)
        return EXIT_USAGE
    from tileauto.errors import CacheError

    try:
        return int(args.func(args))
    except _Failure as exc:
        print(f"tileauto: error: {exc}", file=sys.stderr)
        return exc.code
    except CacheError as exc:
        print(f"tileauto: error: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except OSError as exc:
        print(f"tileauto: error: {exc}", file=sys.stderr)
        return EXIT_FAIL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
