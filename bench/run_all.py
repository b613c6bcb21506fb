"""Run every benchmark in bench/, one after the other, and write the results and a plot.

    python bench/run_all.py [--out DIR] [--quick] [--only NAME ...] [--load N] [--timeout-s 3600]
                            [--replot] [--compare OTHER_DIR] [--docs-plot]

Runs each ``bench/*.py`` script (this one and ``_*.py`` excepted) in its own process, never two
at once (they would disturb each other's timings), echoes its output, and writes into the
output folder ``--out`` (default: a new ``tileauto-bench-<date>`` folder in the system's
temporary directory; nothing is written into the repository):

- ``results.md``: the date, the machine, the load, a summary table of the headline figures
  against their targets (a missed one says MISSED), then every script's full output;
- ``results.json``: the same, machine-readable (each script's figures too);
- ``performance.png``: one figure with a panel per benchmark, when matplotlib is importable
  (``pip install 'tileauto[plot]'``); without it the plot is skipped with a message.
  ``--docs-plot`` also copies it to ``docs/img/performance.png``, the plot of the performance
  page (only from a complete run).

``--load N`` runs the benchmarks under an artificial load: N busy processes (``while True``)
for the whole run, stopped at the end; ``thread_pool.py``, which runs its own loads, is
skipped then. ``--compare OTHER_DIR`` prints, after the report, every
verdict that differs between this run and the one in ``OTHER_DIR`` (for instance a run without
and one with ``--load 2``: the verdicts should not flip).

``--quick`` passes small sizes and few rounds to every script (a smoke run of a few minutes;
its figures are not the ones to report). ``--replot`` runs nothing: it rebuilds the report and
the plot from ``bench/results/results.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = Path(tempfile.gettempdir())  # replaced by --out in main()
DOCS_PLOT = ROOT / "docs" / "img" / "performance.png"
ORDER = ["overhead", "kernels_vs_torch", "tune_time", "warm_start", "stability", "thread_pool"]
# accept --json PATH and --quick
JSON_SCRIPTS = {"overhead", "kernels_vs_torch", "stability", "thread_pool"}
# scripts that load the machine themselves (0, 1, 2 busy processes): under --load N their
# blocks would have N more, and their fresh processes barely get a core (one took over 9
# minutes in its second block at --load 2)
OWN_LOAD = {"thread_pool"}
QUICK_ARGS = {
    "tune_time": ["--size", "256", "--rep", "20", "--rounds", "2"],
    "warm_start": ["--runs", "1", "--size", "256"],
    "torch_op": ["--rounds", "3", "--configs", "1"],
    "par_compile": ["--quick"],
}


# -- running -----------------------------------------------------------------------------------
def scripts(only: list[str] | None) -> list[Path]:
    found = {p.stem: p for p in BENCH.glob("*.py") if p.name != Path(__file__).name}
    found = {name: p for name, p in found.items() if not name.startswith("_")}
    names = [n for n in ORDER if n in found] + sorted(n for n in found if n not in ORDER)
    if only:
        unknown = sorted(set(only) - set(found))
        if unknown:
            raise SystemExit(f"--only: no bench/{unknown[0]}.py (have: {', '.join(names)})")
        names = [n for n in names if n in only]
    return [found[n] for n in names]


def run_script(path: Path, quick: bool, timeout_s: float) -> dict:
    name = path.stem
    cmd = [sys.executable, str(path)]
    json_path = RESULTS / f"{name}.json"
    if name in JSON_SCRIPTS:
        json_path.unlink(missing_ok=True)
        cmd += ["--json", str(json_path)] + (["--quick"] if quick else [])
    elif quick:
        cmd += QUICK_ARGS.get(name, [])
    shown = " ".join(
        ["python", *(os.path.relpath(c, ROOT) if c.startswith(str(ROOT)) else c for c in cmd[1:])]
    )
    print(f"\n=== {shown}", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    lines: list[str] = []
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)
            if time.perf_counter() - start > timeout_s:
                proc.kill()
                lines.append(f"\n[run_all: killed after {timeout_s:g} s]\n")
                break
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(lines)
    figures = None
    if name in JSON_SCRIPTS and json_path.is_file():
        figures = json.loads(json_path.read_text())
    elif name in PARSERS:
        figures = PARSERS[name](output)
    return {
        "command": shown,
        "rc": rc,
        "seconds": time.perf_counter() - start,
        "output": output,
        "figures": figures,
    }


# -- parsing the scripts that print text only ----------------------------------------------------
def _floats(pattern: str, text: str) -> list[float] | None:
    m = re.search(pattern, text)
    return [float(g) for g in m.groups()] if m else None


def parse_tune_time(text: str) -> dict:
    out: dict[str, float] = {}
    if got := _floats(r"wall / floor: cold ([\d.]+), warm ([\d.]+)", text):
        out["wall_floor_cold"], out["wall_floor_warm"] = got
    if got := _floats(r"compile phase, 1 worker / 2 workers: .*= ([\d.]+)x", text):
        out["compile_speedup"] = got[0]
    if got := _floats(
        r"the machine's own speedup, .*?: ([\d.]+)x .*compile speedup / it: ([\d.]+)", text
    ):
        out["machine_speedup"], out["compile_efficiency"] = got
    if got := _floats(r"CPU seconds per compile: 1 worker ([\d.]+), 2 workers ([\d.]+)", text):
        out["compile_cpu_ratio"] = got[1] / got[0]
    if got := _floats(r"compile phase, .*; load ([\d.]+)-([\d.]+)\)", text):
        out["compile_load_min"], out["compile_load_max"] = got
    if got := _floats(r"whole tuning, 1 worker / 2 workers \(warm\): .*= ([\d.]+)x", text):
        out["tuning_speedup"] = got[0]
    if got := _floats(
        r"cold process, forkserver / forked workers: .*= ([\d.]+)x \(wall / floor ([\d.]+) with",
        text,
    ):
        out["cold_fork_speedup"], out["wall_floor_cold_forkserver"] = got
    if got := _floats(r"adds TVM's import, ([\d.]+) s", text):
        out["tvm_import_s"] = got[0]
    if got := _floats(r"TVM's import left out of its floor: wall / floor ([\d.]+)", text):
        out["wall_floor_cold_no_import"] = got[0]
    return out


def parse_warm_start(text: str) -> dict:
    out: dict[str, float | str] = {}
    for key, pattern in (
        ("cold_s", r"cold process: start -> ready ([\d.]+) s"),
        ("import_s", r"warm process \(median of \d+\): import ([\d.]+) s"),
        ("load_s", r"warm process .*, load ([\d.]+) s"),
        ("first_call_s", r"warm process .*, first call ([\d.]+) s"),
        ("ready_s", r"load \+ first call ([\d.]+) s"),
        ("ready_cpu_s", r"load \+ first call in CPU seconds ([\d.]+) s"),
        ("ready_share", r"the process had ([\d.]+) of a core"),
        ("vs_tuned", r"warm median / tuned median ([\d.]+)"),
        ("spread_limit", r"target <= p80 / median ([\d.]+)"),
        ("one_thread_ratio", r"1 thread / tuned threads ([\d.]+)"),
    ):
        if got := _floats(pattern, text):
            out[key] = got[0]
    if m := re.search(r"thread count: tuned (\d+), the kernel's pool runs (\d+)", text):
        out["tuned_threads"], out["pool_threads"] = int(m.group(1)), int(m.group(2))
    return out


PARSERS = {"tune_time": parse_tune_time, "warm_start": parse_warm_start}


# -- the report ----------------------------------------------------------------------------------
def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        rev = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        rev = "unknown"

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": version("torch"),
        "tvm": version("apache-tvm"),
        "tileauto": rev,
        "load_average": os.getloadavg()[0],
    }


def _verdict(value: float | None, target: float | None, at_least: bool = False) -> str:
    if value is None or target is None:
        return ""
    return "met" if (value >= target if at_least else value <= target) else "MISSED"


def summary_rows(results: dict) -> list[tuple[str, str, str, str, str]]:
    """(benchmark, figure, value, target, verdict) rows of the headline figures."""
    rows: list[tuple[str, str, str, str, str]] = []

    def row(
        bench: str,
        what: str,
        value: float | None,
        target: float | None,
        fmt: str = ".2f",
        at_least: bool = False,
    ) -> None:
        shown = "n/a" if value is None else format(value, fmt)
        sign = ">=" if at_least else "<="
        rows.append(
            (
                bench,
                what,
                shown,
                "" if target is None else f"{sign} {target:g}",
                _verdict(value, target, at_least),
            )
        )

    scripts_ = results.get("scripts", {})
    if f := (scripts_.get("overhead") or {}).get("figures"):
        v = f["variants"]
        row("overhead", "JITKernel k(a, out) / (a) raw f(a, out)", v["jit_out"]["vs_raw"], 1.5)
        row("overhead", "JITKernel k(a) / (b) raw + torch.empty", v["jit"]["vs_raw_alloc"], 1.5)
        row("overhead", "prepare()() / (a) raw", v["prepare"]["vs_raw"], 1.1)
        if summary := v.get("summary"):
            row("overhead", "JITKernel k(a) / torch.mul(a, b)", summary["jit_vs_torch_mul"], 1.0)
            row("overhead", "JITKernel k(a) / torch.add(a, b)", summary["jit_vs_torch_add"], 1.0)
            row(
                "overhead",
                f"GEMM 16^3 tuned k(a, b) / torch.matmul (kernel alone {summary['gemm16_kernel_ns']:.0f} ns)",
                summary["gemm16_vs_matmul"],
                1.0,
            )
    if f := (scripts_.get("kernels_vs_torch") or {}).get("figures"):
        for c in f["cases"]:
            rows.append(
                (
                    "kernels_vs_torch",
                    f"{c['label']} / {c['torch_op']}: min / median (load "
                    f"{c.get('load_before', float('nan')):.1f}-{c.get('load_after', float('nan')):.1f}, "
                    f"threads {c.get('kernel_threads') or 'none (serial)'}"
                    f"{', ' + c['pool'] + ' pool' if c.get('pool') else ''}"
                    f"{', spin off (busy machine)' if c.get('spin') == '0' and c.get('pool') != 'tileauto' else ''})",
                    f"{c['ratio_min']:.2f} / {c['ratio']:.2f}",
                    f"<= {c['target']:g}",
                    c.get("verdict") or _verdict(max(c["ratio_min"], c["ratio"]), c["target"]),
                )
            )
    if f := (scripts_.get("tune_time") or {}).get("figures"):
        cold_import = ""
        if "tvm_import_s" in f:
            cold_import = f" (its floor includes TVM's import, {f['tvm_import_s']:.2f} s)"
        row(
            "tune_time",
            f"tuning wall / independent floor, cold process{cold_import}",
            f.get("wall_floor_cold"),
            1.25,
        )
        if "wall_floor_cold_no_import" in f:
            row(
                "tune_time",
                "tuning wall / floor, cold process, TVM's import left out of the floor",
                f["wall_floor_cold_no_import"],
                None,
            )
        row(
            "tune_time",
            "tuning wall / independent floor, warm process",
            f.get("wall_floor_warm"),
            1.25,
        )
        if "wall_floor_cold_forkserver" in f:
            row(
                "tune_time",
                "tuning wall / floor, cold process, TILEAUTO_WORKER_START=forkserver",
                f["wall_floor_cold_forkserver"],
                None,
            )
            row(
                "tune_time",
                "cold tuning, forkserver / forked workers",
                f["cold_fork_speedup"],
                None,
            )
        load = ""
        if "compile_load_min" in f:
            load = f" (load {f['compile_load_min']:.1f}-{f['compile_load_max']:.1f})"
        machine = ""
        if "machine_speedup" in f:
            machine = f"; the machine's own 2-process speedup {f['machine_speedup']:.2f}x"
        row(
            "tune_time",
            f"compile phase speedup, 2 workers vs 1, interleaved{load}{machine} (target 1.6 on "
            "2 idle cores: judged as the efficiency below)",
            f.get("compile_speedup"),
            None,
        )
        row(
            "tune_time",
            "compile parallel efficiency: compile speedup / the machine's own speedup",
            f.get("compile_efficiency"),
            0.8,
            at_least=True,
        )
        row("tune_time", "CPU s per compile, 2 workers / 1", f.get("compile_cpu_ratio"), None)
        row("tune_time", "whole tuning speedup, 2 workers vs 1", f.get("tuning_speedup"), None)
    if f := (scripts_.get("warm_start") or {}).get("figures"):
        share = f" at {f['ready_share']:.2f} of a core" if "ready_share" in f else ""
        row(
            "warm_start",
            f"warm process: load + first call, wall (s){share}",
            f.get("ready_s"),
            None,
            ".3f",
        )
        row(
            "warm_start",
            "warm process: load + first call, CPU (s)",
            f.get("ready_cpu_s"),
            0.3,
            ".3f",
        )
        if "pool_threads" in f:
            same = f["pool_threads"] == f["tuned_threads"]
            rows.append(
                (
                    "warm_start",
                    "warm process, nothing set: threads the kernel's pool runs / tuned with",
                    f"{f['pool_threads']} / {f['tuned_threads']}",
                    "equal",
                    "met" if same else "MISSED",
                )
            )
        row(
            "warm_start",
            "warm process, nothing set: median call / tuned median",
            f.get("vs_tuned"),
            f.get("spread_limit"),
        )
        row(
            "warm_start",
            "the same kernel forced to 1 thread / as loaded",
            f.get("one_thread_ratio"),
            None,
        )
        row("warm_start", "cold process, start to ready, tuning (s)", f.get("cold_s"), None)
    if f := (scripts_.get("thread_pool") or {}).get("figures"):
        n, verdicts = f["tuned_threads"], f["verdicts"]["median"]
        for load, e in verdicts["loads"].items():
            rows.append(
                ("thread_pool", f"{load} busy processes: fastest (median call)", e["best_label"],
                 "", "")
            )  # fmt: skip
        o = verdicts["overall"]
        rows.append(
            ("thread_pool", "one setting for every load: its worst / the row's best",
             f"{o['best_label']} {o['worst_vs_best'][o['best']]:.2f}x", "", "")
        )  # fmt: skip
        rows.append(
            ("thread_pool", f"{n} threads, TVM's pool with its default spin: worst / row's best",
             f"{o['worst_vs_best'][f'default/{n}']:.2f}x", "", "")
        )  # fmt: skip
        if f"tileauto/{n}" in o["worst_vs_best"]:
            rows.append(
                ("thread_pool", f"{n} threads, tileauto's pool (as loaded): worst / row's best",
                 f"{o['worst_vs_best'][f'tileauto/{n}']:.2f}x", "", "")
            )  # fmt: skip
    if f := (scripts_.get("stability") or {}).get("figures"):
        for size, st in f["sizes"].items():
            gap = st.get("worst_gap") or 0.0
            rows.append(
                (
                    "stability",
                    f"GEMM {size}^3, {f['runs']} tunings: winners (head-to-head gap {gap * 100:.1f}%)",
                    st["verdict"],
                    "same, or within 5% head to head",
                    "met" if st["verdict"] != "UNSTABLE" else "MISSED",
                )
            )
            for name, e in (st.get("experiment") or {}).items():
                rows.append(
                    (
                        "stability",
                        f"GEMM {size}^3, same kernels timed in {name}",
                        f"{e['verdict']} (gap {e['worst_gap'] * 100:.0f}%)",
                        "",
                        "",
                    )
                )
    return rows


def write_report(results: dict) -> Path:
    m = results["machine"]
    lines = [
        "# tileauto benchmark results",
        "",
        f"- date: {results['date']}",
        f"- machine: {m['cpu']}, {m['cores']} cores; {m['platform']}",
        f"- python {m['python']}, torch {m['torch']}, apache-tvm {m['tvm']}, tileauto {m['tileauto']}",
        f"- load average at the start: {m['load_average']:.2f}, at the end: "
        f"{m.get('load_average_end', float('nan')):.2f}; artificial load: "
        f"{results.get('busy_processes', 0)} busy process(es)"
        + (" (quick run: smoke figures)" if results.get("quick") else ""),
        "",
        "| benchmark | figure | value | target | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {' | '.join(r)} |" for r in summary_rows(results)]
    for name, s in results["scripts"].items():
        lines += [
            "",
            f"## {name}",
            "",
            f"`{s['command']}`: exit {s['rc']}, {s['seconds']:.0f} s",
            "",
            "```",
            s["output"].rstrip(),
            "```",
        ]
    path = RESULTS / "results.md"
    path.write_text("\n".join(lines) + "\n")
    return path


# -- the plot ------------------------------------------------------------------------------------
def make_plot(results: dict, docs_plot: bool = False) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable: skipping the plot (pip install 'tileauto[plot]')")
        return []
    figs = {name: s.get("figures") for name, s in results["scripts"].items()}
    fig, axes = plt.subplots(2, 3, figsize=(18, 10))
    panels = [
        (_plot_overhead, figs.get("overhead")),
        (_plot_kernels, figs.get("kernels_vs_torch")),
        (_plot_tune_time, figs.get("tune_time")),
        (_plot_warm_start, figs.get("warm_start")),
        (_plot_stability, figs.get("stability")),
        (_plot_experiment, figs.get("stability")),
    ]
    for ax, (draw, data) in zip(axes.flat, panels):
        if data:
            draw(ax, data)
        else:
            ax.set_axis_off()
            ax.text(0.5, 0.5, f"{draw.__name__[6:]}: not run", ha="center", va="center")
    m = results["machine"]
    fig.suptitle(
        f"tileauto performance, {results['date'][:10]}: {m['cpu']}, {m['cores']} cores, "
        f"torch {m['torch']}, apache-tvm {m['tvm']}"
        + (" (quick run)" if results.get("quick") else "")
    )
    fig.tight_layout()
    out = RESULTS / "performance.png"
    fig.savefig(out, dpi=90)
    plt.close(fig)
    if not docs_plot:
        return [out]
    if not results.get("complete"):
        print(f"{DOCS_PLOT} left as it is: a quick or partial run")
        return [out]
    DOCS_PLOT.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out, DOCS_PLOT)
    return [out, DOCS_PLOT]


def _plot_overhead(ax, f: dict) -> None:
    keys = [
        "raw",
        "jit_out",
        "prepare",
        "alloc",
        "raw_alloc",
        "jit",
        "torch_out",
        "torch",
        "jit_symbolic",
    ]
    v = f["variants"]
    keys = [k for k in keys if k in v]
    values = [v[k]["median_ns"] for k in keys]
    ours = ("jit", "jit_out", "prepare", "jit_symbolic")
    colors = ["tab:blue" if k in ours else "tab:gray" for k in keys]
    ax.barh(range(len(keys)), values, color=colors)
    ax.set_yticks(range(len(keys)), [v[k]["label"] for k in keys], fontsize=8)
    ax.invert_yaxis()
    for i, k in enumerate(keys):
        ax.text(
            values[i],
            i,
            f" {values[i]:.0f} ns = {v[k]['vs_raw']:.2f}x (a)",
            va="center",
            fontsize=8,
        )
    ax.set_xlim(0, max(values) * 1.45)
    ax.set_xlabel("ns per call (median over rounds)")
    ax.set_title(f"per-call overhead, {f['n']} float32 (blue: tileauto)")


def _plot_kernels(ax, f: dict) -> None:
    cases = f["cases"]
    x = range(len(cases))
    ax.bar(x, [c["ratio_min"] for c in cases], color="tab:blue", label="fastest / fastest call")
    ax.plot(x, [c["ratio"] for c in cases], "o", color="tab:orange", label="median / median")
    for i, c in enumerate(cases):
        ax.hlines(c["target"], i - 0.4, i + 0.4, colors="tab:red", linestyles="--")
        ax.text(i, c["ratio_min"], f"{c['ratio_min']:.2f}", ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(list(x), [c["label"] for c in cases], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("tuned kernel time / torch time (below 1: faster)")
    ax.set_title("tuned examples vs torch (red: target, at most)")
    ax.legend(fontsize=8)


def _plot_tune_time(ax, f: dict) -> None:
    labels, values = [], []
    for key, label in (
        ("wall_floor_cold", "wall / floor\ncold"),
        ("wall_floor_warm", "wall / floor\nwarm process"),
        ("wall_floor_cold_forkserver", "wall / floor\ncold, forkserver"),
        ("compile_speedup", "compile speedup\n2 vs 1 worker"),
        ("tuning_speedup", "tuning speedup\n2 vs 1 worker"),
    ):
        if key in f:
            labels.append(label)
            values.append(f[key])
    ax.bar(range(len(values)), values, color=["tab:blue"] * 2 + ["tab:gray"] * (len(values) - 2))
    for i, value in enumerate(values):
        ax.text(i, value, f"{value:.2f}", ha="center", va="bottom")
    ax.axhline(1.25, color="tab:red", linestyle="--", label="wall / floor target 1.25")
    ax.set_xticks(range(len(values)), labels, fontsize=8)
    ax.set_title("tune time (GEMM space)")
    ax.legend(fontsize=8)


def _plot_warm_start(ax, f: dict) -> None:
    keys = [("import_s", "import tileauto"), ("warm_s", "warm cache"), ("cold_s", "cold (tunes)")]
    keys = [(k, label) for k, label in keys if k in f]
    values = [f[k] for k, _ in keys]
    ax.bar(range(len(values)), values, color=["tab:gray", "tab:blue", "tab:orange"][: len(values)])
    for i, value in enumerate(values):
        ax.text(i, value, f"{value:.2f} s", ha="center", va="bottom")
    ax.set_xticks(range(len(values)), [label for _, label in keys])
    ax.set_ylabel("process start -> ready kernel (s)")
    extra = f.get("warm_minus_import_s")
    ax.set_title(
        "warm start"
        + (f": warm - import = {extra:.3f} s (target <= 0.3)" if extra is not None else "")
    )


def _plot_stability(ax, f: dict) -> None:
    ticks, labels = [], []
    x = 0
    for size, s in f["sizes"].items():
        base = min(r["trials"][r["winner"]]["median_ms"] for r in s["runs"])
        for i, r in enumerate(s["runs"]):
            w = r["trials"][r["winner"]]
            med = w["median_ms"] / base
            ax.errorbar(
                x,
                med,
                yerr=[[med - w["p20_ms"] / base], [w["p80_ms"] / base - med]],
                fmt="o",
                capsize=4,
                color=f"C{list(dict.fromkeys(q['winner'] for q in s['runs'])).index(r['winner'])}",
            )
            ticks.append(x)
            labels.append(f"{size}^3\nrun {i + 1}" + (f"\n{s['verdict']}" if i == 1 else ""))
            x += 1
        x += 1
    ax.set_xticks(ticks, labels, fontsize=8)
    ax.set_ylabel("winner median (p20-p80) / best winner median")
    ax.set_title(f"stability: {f['runs']} tunings in a row (colour: winning config)")


def _plot_experiment(ax, f: dict) -> None:
    sizes = [size for size, s in f["sizes"].items() if s.get("experiment")]
    if not sizes:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "stability experiment: not run", ha="center", va="center")
        return
    width = 0.35
    for j, name in enumerate(("blocks", "interleaved")):
        gaps = [f["sizes"][s]["experiment"][name]["worst_gap"] * 100 for s in sizes]
        xs = [i + (j - 0.5) * width for i in range(len(sizes))]
        ax.bar(xs, gaps, width, label=name)
        for xi, g, s in zip(xs, gaps, sizes):
            ax.text(
                xi,
                g,
                f"{g:.0f}%\n{f['sizes'][s]['experiment'][name]['verdict']}",
                ha="center",
                va="bottom",
                fontsize=7,
            )
    ax.set_xticks(range(len(sizes)), [f"GEMM {s}^3" for s in sizes])
    ax.set_ylabel("largest gap between repeated runs' winners (%)")
    ax.set_title("same kernels timed in blocks (as tuned) vs interleaved")
    ax.legend(fontsize=8)


# -- main ----------------------------------------------------------------------------------------
def start_load(n: int) -> list[subprocess.Popen]:
    """``n`` busy processes: the artificial load of ``--load``."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def compare(results: dict, other_dir: Path) -> list[str]:
    """Lines naming every summary verdict that differs from the run in ``other_dir``."""
    other = json.loads((other_dir / "results.json").read_text())
    theirs = {(r[0], r[1].split(" (")[0]): r for r in summary_rows(other)}
    lines = []
    for r in summary_rows(results):
        o = theirs.get((r[0], r[1].split(" (")[0]))
        if o is not None and r[4] and o[4] and r[4] != o[4]:
            lines.append(f"FLIPPED {r[0]}: {r[1]}: {o[4]} ({o[2]}) there, {r[4]} ({r[2]}) here")
    return lines


def main(argv: list[str] | None = None) -> int:
    global RESULTS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="output folder (default: a new temporary one)")
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds (smoke run)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these scripts")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="limit per script")
    parser.add_argument("--load", type=int, default=0, metavar="N", help="N busy processes")
    parser.add_argument(
        "--replot", action="store_true", help="rebuild report and plot from --out, run nothing"
    )
    parser.add_argument("--compare", type=Path, metavar="DIR", help="flag verdicts that differ")
    parser.add_argument(
        "--docs-plot", action="store_true", help="copy the plot to docs/img (complete runs only)"
    )
    args = parser.parse_args(argv)
    if args.replot and args.out is None:
        parser.error("--replot needs --out, the folder of the run to report again")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    RESULTS = args.out or Path(tempfile.gettempdir()) / f"tileauto-bench-{stamp}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    results_path = RESULTS / "results.json"
    if args.replot:
        results = json.loads(results_path.read_text())
        for name, parse in PARSERS.items():  # parsed again from the output: a fixed parser counts
            script = results["scripts"].get(name)
            if script and script.get("output"):
                script["figures"] = parse(script["output"])
    else:
        results = {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "quick": args.quick,
            "complete": not args.quick and not args.only,  # only such a run updates the docs plot
            "busy_processes": args.load,
            "machine": machine(),
            "scripts": {},
        }
        busy = start_load(args.load)
        try:
            for path in scripts(args.only):
                if args.load and path.stem in OWN_LOAD:
                    print(f"\n=== {path.name}: skipped under --load (it runs its own loads)")
                    continue
                results["scripts"][path.stem] = run_script(path, args.quick, args.timeout_s)
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
        results["machine"]["load_average_end"] = os.getloadavg()[0]
        results_path.write_text(json.dumps(results, indent=1, default=str))
    report = write_report(results)
    print(f"\nwrote {report} and {results_path}")
    for path in make_plot(results, args.docs_plot):
        print(f"wrote {path}")
    if args.compare:
        flips = compare(results, args.compare)
        print("\n".join(flips) if flips else f"no verdict differs from {args.compare}")
    failed = [name for name, s in results["scripts"].items() if s["rc"] != 0]
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
