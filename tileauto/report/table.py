"""The trial table and the failure summary, as plain text.

Pure functions of trials, so the console, the trial log's finish line, ``AutotuneResult.table()``
and ``tileauto show`` print the same table.
"""

from __future__ import annotations

from collections.abc import Sequence

from tileauto.records import SessionSummary, Trial, is_never_tried


def format_ms(value: float) -> str:
    """Milliseconds with four significant digits (sub-microsecond kernels stay readable)."""
    return f"{value:.4g}"


def format_config(config: dict) -> str:
    """``k=v, ...``, or ``(nothing tuned)`` for the empty config (a factory without tunables,
    or a call that fixes every one: ``(defaults)`` said the call's values were not used)."""
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "(nothing tuned)"


_CELL = 70  # characters of a config or a status shown in a table cell; longer ones are cut


def _cell(text: str) -> str:
    """``text`` on one line (control characters such as a newline escaped, as repr does) and
    at most ``_CELL`` characters: one row per config, whatever its values."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= _CELL else text[: _CELL - 3] + "..."


def format_table(
    trials: Sequence[Trial], best_index: int | None, default: Trial | None, title: str = ""
) -> str:
    """A plain-text table: config, status, median and spread, speedup over default, winner mark."""
    base = default.latency_ms if default is not None and default.ok else None
    rows = [
        ("", "#", "config", "status", "median ms", "p20-p80 ms", "n", "vs default", "compile s")
    ]
    listed = [t for t in trials if not is_never_tried(t)]  # counted below the table instead
    never = len(trials) - len(listed)
    if default is not None and default.index < 0:
        listed = [default, *listed]
    for t in listed:
        mark = "*" if t.index == best_index and t.ok else ""
        idx = "default" if t.index < 0 else str(t.index)
        if t.ok and t.latency is not None:
            lat = format_ms(t.latency.median_ms)
            spread = f"{format_ms(t.latency.p20_ms)}-{format_ms(t.latency.p80_ms)}"
            n = str(t.latency.samples)
            speed = f"{base / t.latency.median_ms:.2f}x" if base and t.latency.median_ms else "-"
            status = "ok"
        else:
            lat, spread, n, speed = "-", "-", "-", "-"
            status = _cell(t.reason)
        comp = f"{t.compile_s:.2f}" if t.compile_s is not None else "-"
        rows.append(
            (mark, idx, _cell(format_config(t.config)), status, lat, spread, n, speed, comp)
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [title] if title else []
    for j, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    if never:
        lines.append(f"{never} config(s) of the space never tried (not failures; not listed)")
    return "\n".join(lines)


_LISTED = 10  # failed configs listed one by one; more are grouped by reason
_GROUPS = 8  # reasons listed when grouped (the log has every config)
_EXAMPLES = 3  # configs named per reason


def failure_summary(trials: Sequence[Trial]) -> str:
    """Why the failed configs failed: one line per config when there are a few; grouped by
    reason, most frequent first, when there are more (a space of thousands whose configs all
    fail for one reason gets two lines, not thousands). Configs the search never tried are
    left out: they are not failures, and the caller counts them."""
    failed = [t for t in trials if not t.ok and not is_never_tried(t)]
    if len(failed) <= _LISTED:
        return "\n".join(f"  [{t.index}] {format_config(t.config)}: {t.reason}" for t in failed)
    groups: dict[str, list[Trial]] = {}
    for t in failed:
        groups.setdefault(t.reason, []).append(t)
    ranked = sorted(groups.items(), key=lambda item: -len(item[1]))  # stable: first seen first
    lines = []
    for reason, group in ranked[:_GROUPS]:
        named = ", ".join(f"[{t.index}] {format_config(t.config)}" for t in group[:_EXAMPLES])
        more = f" and {len(group) - _EXAMPLES} more" if len(group) > _EXAMPLES else ""
        lines.append(f"  {len(group)} config(s): {reason}\n    {named}{more}")
    if len(ranked) > _GROUPS:
        rest = sum(len(group) for _, group in ranked[_GROUPS:])
        lines.append(f"  {rest} more config(s), for {len(ranked) - _GROUPS} other reasons")
    return "\n".join(lines)


def summary_table(name: str, summary: SessionSummary) -> str:
    """The table of a finished session (``summary``: what ``Reporter.finished`` gets), titled."""
    trials = summary.trials
    best = summary.best
    passed = sum(t.ok for t in trials)
    never = summary.never_tried  # not listed as trials (a large product)
    measured = sum(not is_never_tried(t) for t in trials)
    if never is None:  # a constrained product scanned only as far as the search went
        title = f"autotune {name}: {measured} configs measured (the rest never tried)"
    else:
        size = len(trials) + never
        title = f"autotune {name}: {size} configs"
        if measured < size:
            title += f", {measured} measured ({size - measured} never tried)"
    title += f", {passed} passed"
    title += f", {summary.elapsed_s:.1f} s" + (", no winner" if best is None else "")
    if summary.stop_reason:
        reason = summary.stop_reason.removeprefix("search stopped: ")  # "stopped" once
        title += f" (stopped: {reason})"
    table = format_table(trials, best.index if best else None, summary.default, title=title)
    if never is None:
        table += (
            "\nthe rest of the space never tried (not failures; not listed, not counted: the "
            "constraints were checked only as far as the search went)"
        )
    elif never:
        table += f"\n{never:,} config(s) of the space never tried (not failures; not listed)"
    pruned = summary.pruned
    if pruned:
        rules = ", ".join(f"{rule!r}: {n:,}" for rule, n in pruned.items())
        part = " in the part of the product checked" if never is None else ""
        table += (
            f"\npruned by constraints before compiling (not failures){part}: "
            f"{sum(pruned.values()):,} ({rules})"
        )
    return table
