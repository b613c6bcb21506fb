"""The fleet's Redis on the command line: ``list|show|verify|clear --remote``, ``push``, ``pull``.

``push`` seeds a fleet from a machine that has tuned (a CI job before a rollout): every tuned
disk entry is published, with its kernel when a signing key is set. ``pull`` writes signed
entries into the disk cache (a kernel is only ever written after its signature verifies).
A server that cannot be reached is an error naming its address, not a traceback.
"""

from __future__ import annotations

import argparse
import json
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

TYPE_CHECKING = False  # as in _cache_commands: no typing import before a verb needs it
if TYPE_CHECKING:
    from typing import Any

_NO_REMOTE = (
    "no remote cache: give --remote redis://host:6379/0 (or rediss:// for TLS), or set "
    "TILEAUTO_REMOTE_CACHE"
)


def remote_of(args: argparse.Namespace) -> Any:
    """The remote cache of ``--remote URL`` or ``TILEAUTO_REMOTE_CACHE``, answering PING."""
    from tileauto.cache.remote import RemoteCache
    from tileauto.errors import SettingsError

    settings = settings_of(args)
    try:
        cache = RemoteCache.from_settings(settings, getattr(args, "remote", None))
    except SettingsError as exc:
        raise CommandError(str(exc).replace("url=", "--remote="), EXIT_USAGE) from None
    if cache is None:
        raise CommandError(_NO_REMOTE, EXIT_USAGE)
    try:
        cache.ping()
    except ImportError as exc:
        raise CommandError(str(exc), EXIT_FAIL) from None
    except Exception as exc:  # noqa: BLE001 - any client error: the server is not usable
        raise CommandError(f"cannot reach {cache.address}: {type(exc).__name__}: {exc}") from None
    return cache


def _checked(cache: Any) -> list[Any]:
    """Every entry as :class:`tileauto.cache.remote.Checked`: usable, unusable or of another
    version."""
    from tileauto.cache.remote import iter_checked

    return list(iter_checked(cache))


def _why(checked: Any) -> str | None:
    """Why an entry is not used here: its problem, or the version that differs."""
    if checked.problem is not None:
        return str(checked.problem)
    return f"{checked.other} (left alone)" if checked.other is not None else None


def cmd_list(args: argparse.Namespace) -> int:
    cache = remote_of(args)
    now = time.time()
    entries = _checked(cache)
    if args.json:
        data = [_listed(c, now) for c in entries]
        print(json.dumps(data, indent=1))
        return EXIT_OK
    if not entries:
        print(f"no entries in {cache.address}")
        return EXIT_OK
    rows = [("KEY", "KERNEL", "TARGET", "AGE", "SIZE", "BEST MS", "BINARY")]
    for c in entries:
        key, entry = c.key, c.entry
        if entry is None:
            rows.append((key, f"({_why(c)})", "-", "-", "-", "-", "-"))
            continue
        lat = entry.latency_ms
        rows.append(
            (
                key,
                str(entry.record.get("kernel")),
                str(entry.record.get("target")),
                format_age(now - float(entry.record.get("created", now))),
                format_size(entry.size_bytes),
                f"{lat:.4g}" if lat is not None else "-",
                "signed" if entry.kernel else "-",
            )
        )
    print(text_table(rows))
    print(f"{len(entries)} entries in {cache.address}")
    return EXIT_OK


def _listed(checked: Any, now: float) -> dict[str, Any]:
    """One entry of ``list --remote --json``."""
    entry = checked.entry
    record = entry.record if entry is not None else {}
    return {
        "key": checked.key,
        "kernel": record.get("kernel"),
        "target": record.get("target"),
        "age_s": round(now - float(record.get("created", now)), 3) if entry else None,
        "size_bytes": entry.size_bytes if entry else None,
        "latency_ms": entry.latency_ms if entry else None,
        "signed_kernel": bool(entry and entry.kernel),
        "problem": _why(checked),
    }


def _find(cache: Any, prefix: str) -> str:
    matches = [k for k in cache.entry_keys() if k.startswith(prefix)]
    if not matches:
        raise CommandError(f"no remote entry with key {prefix!r} in {cache.address}")
    if len(matches) > 1:
        raise CommandError(f"{prefix!r} matches {len(matches)} remote entries; give more of it")
    return matches[0]


def cmd_show(args: argparse.Namespace) -> int:
    from tileauto.cache.remote import version_of_fields
    from tileauto.report.table import format_table

    cache = remote_of(args)
    key = _find(cache, args.key)
    fields = cache.fields(key)
    entry, problem = cache.check(key, fields)
    if entry is None:
        other = version_of_fields(fields) or "another format or version"
        print(f"key     {key}\nstatus  {problem or f'{other} (left alone)'}")
        return EXIT_FAIL
    record = entry.record
    versions = record.get("versions", {})
    created = float(record.get("created", 0))
    facts = [
        ("key", key),
        ("address", cache.address),
        ("kernel", str(record.get("kernel"))),
        ("target", str(record.get("target"))),
        ("device", json.dumps(record.get("device"), sort_keys=True)),
        ("versions", f"tileauto {versions.get('tileauto')}, TVM {versions.get('tvm')}"),
        ("created", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created))),
        ("size", format_size(entry.size_bytes)),
        ("binary", _binary(entry)),
        ("best config", json.dumps(entry.config, sort_keys=True)),
        ("best latency", f"{entry.latency_ms:.4g} ms" if entry.latency_ms else "-"),
    ]
    width = max(len(k) for k, _ in facts)
    for k, v in facts:
        print(f"{k.ljust(width)}  {v}")
    # the stored configs' trials; the default's row (and the "vs default" ratios) come from
    # the default's own trial, which entry.trials() would add as one more config
    trials = entry.trials(with_default=False)
    best = next((t.index for t in trials if t.ok and t.config == entry.config), None)
    print()
    print(format_table(trials, best, entry.default, title=f"{len(trials)} configs"))
    return EXIT_OK


def _binary(entry: Any) -> str:
    if entry.kernel:
        return "signed kernel (verified)"
    if entry.note:
        return "none usable here: the signature does not verify under TILEAUTO_REMOTE_CACHE_KEY"
    return "none: configs only"


def cmd_verify(args: argparse.Namespace) -> int:
    cache = remote_of(args)
    bad = others = foreign = 0
    checked = _checked(cache)
    for c in checked:
        if c.entry is not None:
            if c.entry.note is not None:  # never deleted: this node's key may be the wrong one
                foreign += 1
                print(f"FAIL  {c.key}: {c.entry.note}")
            elif args.verbose:
                print(f"ok    {c.key}")
            continue
        if c.problem is None:  # valid for the nodes of that version: never a failure
            others += 1
            print(f"other {c.key}: {_why(c)}")
            continue
        bad += 1
        print(f"FAIL  {c.key}: {c.problem}")
        if args.delete:
            cache.delete(c.key)
            print(f"      deleted {c.key}")
    tail = f", {others} of another version (left alone)" if others else ""
    if foreign:
        tail += (
            f", {foreign} whose signature does not verify under this TILEAUTO_REMOTE_CACHE_KEY "
            "(their kernels are not used here: is it the fleet's key?)"
        )
    print(f"{len(checked)} remote entries checked, {bad} unusable{tail}")
    return EXIT_FAIL if (bad and not args.delete) or foreign else EXIT_OK


def cmd_clear(args: argparse.Namespace) -> int:
    cache = remote_of(args)
    now = time.time()
    removed = 0
    for c in _checked(cache):
        key = c.key
        # --older-than: every entry by the time its record says it was published (one of
        # another version too: fresh, it serves that version's nodes); an entry whose record
        # does not say is left to a clear without it (verify --delete removes damaged ones)
        if args.older_than is not None and (c.created is None or now - c.created < args.older_than):
            continue
        if args.dry_run:
            print(f"would delete {key}")
        else:
            cache.delete(key)
        removed += 1
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} {removed} remote entries in {cache.address}")
    return EXIT_OK


def cmd_push(args: argparse.Namespace) -> int:
    """Publish tuned disk entries (all, or the given keys) to the remote cache."""
    from tileauto.cache import catalog
    from tileauto.cache.entry import KERNEL_DIR, KIND_TUNED
    from tileauto.cache.remote import record_of_entry

    cache = remote_of(args)
    root = settings_of(args, reading=True).cache_dir
    entries = catalog.list_entries(root, (KIND_TUNED,))
    if args.keys:
        entries = [_tuned_entry(root, k) for k in args.keys]
    pushed = failed = 0
    for info in entries:
        problem = catalog.verify_entry(info)
        if problem is None and info.manifest is not None:
            meta = {k: v for k, v in info.manifest.items() if k not in ("files", "created")}
            try:
                record = record_of_entry(info.path, meta)
            except (OSError, ValueError) as exc:
                problem = f"unreadable ({exc})"
        if problem is not None:
            print(f"skipped {info.key}: {problem}")
            failed += 1
            continue
        if cache.signing_key is None and _signed_remotely(cache, info.key):
            # a push replaces the entry whole: the fleet's signed kernel would be dropped
            print(
                f"skipped {info.key}: the fleet's entry is signed, and this push without "
                "TILEAUTO_REMOTE_CACHE_KEY would replace it by an unsigned one (no kernel); "
                "set the key to push it"
            )
            failed += 1
            continue
        family = meta.get("family")
        family = family if isinstance(family, str) else None  # the search's transfer finds it
        if cache.put(info.key, record, info.path / KERNEL_DIR, family):
            pushed += 1
        else:
            failed += 1
    binary = "with signed kernels" if cache.signing_key else "configs and trials only"
    print(f"pushed {pushed} entries to {cache.address} ({binary}); {failed} not pushed")
    return EXIT_OK if failed == 0 else EXIT_FAIL


def _signed_remotely(cache: Any, key: str) -> bool:
    """Whether the fleet holds a signed entry of ``key`` (False when Redis does not answer:
    the push then reports that fault itself)."""
    try:
        return cache.signed(key)
    except Exception:  # noqa: BLE001 - the put that follows reports the fault
        return False


def _tuned_entry(root: Any, key: str) -> Any:
    """The tuned disk entry of ``key`` (a prefix); a @jit kernel's entry is refused: the
    fleet's Redis holds tuning results, and a kernel's entry has no configs or trials."""
    from tileauto.cache import catalog
    from tileauto.cache.entry import KIND_TUNED

    info = catalog.find_entry(root, key)
    if info.kind != KIND_TUNED:
        raise CommandError(
            f"push {key}: {info.kind}/{info.key} is a @jit kernel's entry, not a tuned result: "
            f"expected the key of an entry under {KIND_TUNED}/ (tileauto cache list --kind "
            f"{KIND_TUNED})",
            EXIT_USAGE,
        )
    return info


def cmd_pull(args: argparse.Namespace) -> int:
    """Write signed remote entries (all, or the given keys) into the disk cache."""
    from tileauto.cache import disk
    from tileauto.cache.entry import KIND_TUNED

    settings = settings_of(args)
    cache = remote_of(args)
    if cache.signing_key is None:
        raise CommandError(
            "pull writes compiled kernels, which are shared only when signed: set "
            "TILEAUTO_REMOTE_CACHE_KEY to the fleet's key (without it, a tuning finds the remote "
            "entry by itself and compiles its winner)",
            EXIT_USAGE,
        )
    keys = [_find(cache, k) for k in args.keys] if args.keys else cache.entry_keys()
    pulled = skipped = failed = 0
    for key in keys:
        fields = cache.fields(key)
        entry, problem = cache.check(key, fields)
        if entry is None or entry.kernel is None:
            print(f"skipped {key}: {_not_pulled(entry, problem, fields)}")
            skipped += 1
            # a damaged entry, one whose signature fails under this node's key (a wrong
            # key refuses every kernel of the fleet), or one the command named is a failure;
            # the others of a pull of everything (configs only, another version) are not
            # for this node
            foreign = entry is not None and entry.note is not None
            failed += problem is not None or foreign or bool(args.keys)
            continue
        meta = {k: v for k, v in entry.record.items() if k not in ("files", "created", "versions")}
        meta.update(entry.record["versions"])
        meta["kind"] = KIND_TUNED

        def fill(out: Any, entry: Any = entry) -> None:
            entry.write_records(out)
            entry.write_kernel(out)

        disk.write_entry(settings.cache_dir / KIND_TUNED / key, fill, meta, settings.staging_dir)
        pulled += 1
    print(
        f"pulled {pulled} entries from {cache.address} into {settings.cache_dir}; {skipped} skipped"
    )
    return EXIT_FAIL if failed else EXIT_OK


def _not_pulled(entry: Any, problem: str | None, fields: Any) -> str:
    """Why ``pull`` skips an entry."""
    from tileauto.cache.remote import version_of_fields

    if problem is not None:
        return problem
    if entry is None:
        return f"{version_of_fields(fields) or 'another format or version'} (left alone)"
    return entry.note or "no signed kernel (its configs only: a tuning compiles its winner)"
