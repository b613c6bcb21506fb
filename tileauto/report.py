"""The tuning report: a table of every config, and the log file the settings place."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from tileauto.records import Trial


def _ms(value: float) -> str:
    """Milliseconds with four significant digits (sub-microsecond kernels stay readable)."""
    return f"{value:.4g}"


def _fmt_config(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "(defaults)"


def format_table(
    trials: Sequence[Trial], best_index: int | None, default: Trial | None, title: str = ""
) -> str:
    """A plain-text table: config, status, median and spread, speedup over default, winner mark."""
    base = default.latency_ms if default is not None and default.ok else None
    rows = [
        ("", "#", "config", "status", "median ms", "p20-p80 ms", "n", "vs default", "compile s")
    ]
    listed = list(trials)
    if default is not None and default.index < 0:
        listed = [default, *listed]
    for t in listed:
        mark = "*" if t.index == best_index and t.ok else ""
        idx = "default" if t.index < 0 else str(t.index)
        if t.ok and t.latency is not None:
            lat = _ms(t.latency.median_ms)
            spread = f"{_ms(t.latency.p20_ms)}-{_ms(t.latency.p80_ms)}"
            n = str(t.latency.samples)
            speed = f"{base / t.latency.median_ms:.2f}x" if base else "-"
            status = "ok"
        else:
            lat, spread, n, speed = "-", "-", "-", "-"
            status = t.reason
            if len(status) > 70:
                status = status[:67] + "..."
        comp = f"{t.compile_s:.2f}" if t.compile_s is not None else "-"
        rows.append((mark, idx, _fmt_config(t.config), status, lat, spread, n, speed, comp))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    widths[3] = min(widths[3], 70)
    lines = [title] if title else []
    for j, r in enumerate(rows):
        lines.append(
            "  ".join(
                c.ljust(widths[i]) if i != 3 else c.ljust(widths[3]) for i, c in enumerate(r)
            ).rstrip()
        )
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def failure_summary(trials: Sequence[Trial]) -> str:
    """One line per failed config: what it was and why it failed."""
    return "\n".join(
        f"  [{t.index}] {_fmt_config(t.config)}: {t.reason}" for t in trials if not t.ok
    )


def write_log(
    logs_dir: Path, name: str, table: str, trials: Sequence[Trial], extra: dict
) -> Path | None:
    """Write the full report (table plus every trial with its complete error) to the log dir."""
    try:
        logs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = logs_dir / f"autotune-{name}-{stamp}-{os.getpid()}.log"
        body = [table, "", json.dumps(extra, indent=1, default=str), ""]
        for t in trials:
            body.append(json.dumps(t.to_json(), default=str))
        path.write_text("\n".join(body) + "\n")
        return path
    except OSError:
        return None
