"""The ``tileauto`` command: every verb on a real cache, exit codes, errors, ``python -m``."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cache_kernels import jit_matmul, ref_scale_add, tune_scale_add

import tileauto
from tileauto import cli
from tileauto.cache import disk
from tileauto.search import RecordedSpace

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory):
    """A cache with one tuned entry and one @jit entry (built once, copied per test)."""
    cache = tmp_path_factory.mktemp("cli") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEAUTO_CACHE_DIR", str(cache))
        result = tune_scale_add()
        # the tuning's compiles of each config (kept in kernels/ to be shared by re-tunings)
        # are dropped: the tests count one entry of each kind
        shutil.rmtree(cache / "kernels")
        tileauto.jit(out_idx=[-1], target="llvm")(jit_matmul.factory)(16, 16, 16)
    kernel_key = next((cache / "kernels").iterdir()).name
    return cache, result.key, kernel_key


@pytest.fixture
def cache(built_cache, tmp_path, monkeypatch):
    src, tuned, kernel = built_cache
    dest = tmp_path / "cache"
    # the building process's claimed scratch (tmp/) is not copied: a copy's claim is held by
    # nobody, so every clear would count it as a leftover of an ended run
    shutil.copytree(src, dest, ignore=lambda d, names: ["tmp"] if Path(d) == src else [])
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(dest))
    return dest, tuned, kernel


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_key_kernel_target_age_size_and_latency(cache, capsys):
    root, tuned, kernel = cache
    code, out, _ = run(capsys, "cache", "list")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["KIND", "KEY", "KERNEL", "TARGET", "AGE", "SIZE", "BEST", "MS"]
    tuned_row = next(r for r in rows if tuned in r).split()
    assert tuned_row[0] == "autotuner" and tuned_row[3] == "llvm"
    assert tuned_row[2] == "cache_kernels:scale_add"  # MODULE:NAME, as `cache prior` takes it
    assert float(tuned_row[-1]) > 0
    kernel_row = next(r for r in rows if kernel in r).split()
    assert kernel_row[0] == "kernels" and kernel_row[-1] == "-"
    assert kernel_row[2] == "cache_kernels:matmul"  # labelled as tuned entries are
    assert "2 entries" in out
    code, out, _ = run(capsys, "cache", "list", "--json", "--kind", "kernels")
    data = json.loads(out)
    assert [d["key"] for d in data] == [kernel] and data[0]["size_bytes"] > 0


def test_list_an_empty_or_missing_cache(tmp_path, capsys, monkeypatch):
    (tmp_path / "empty").mkdir()
    code, out, _ = run(capsys, "cache", "list", "--cache-dir", str(tmp_path / "empty"))
    assert code == 0 and "no entries" in out
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path / "none"))  # a machine never tuned
    code, out, _ = run(capsys, "cache", "list")
    assert code == 0 and "no entries" in out and not (tmp_path / "none").exists()


@pytest.mark.parametrize("verb", [["list"], ["verify"], ["clear"], ["show", "abc"]])
def test_a_cache_dir_that_is_empty_a_file_or_missing_is_an_error(tmp_path, capsys, verb):
    # "" (an unset shell variable) worked on the default cache; a typo read as an empty cache
    code, out, err = run(capsys, "cache", *verb, "--cache-dir", "")
    assert code == 2 and "--cache-dir is set but empty: expected a directory path" in err
    (tmp_path / "afile").write_text("mine")
    code, out, err = run(capsys, "cache", *verb, "--cache-dir", str(tmp_path / "afile"))
    assert code == 2 and "is a file, not a folder" in err and out == ""
    # a usage error too (it was exit 1, while an empty one or a file was 2)
    code, out, err = run(capsys, "cache", *verb, "--cache-dir", str(tmp_path / "typo"))
    assert code == 2 and "no such folder" in err and out == ""
    assert (tmp_path / "afile").read_text() == "mine" and not (tmp_path / "typo").exists()


def test_clear_and_verify_leave_a_project_folder_of_the_users_alone(tmp_path, capsys):
    # --cache-dir . from a kernel project with its own kernels/, measurements/, sources/
    project = tmp_path / "project"
    mine = ["kernels/gemm/gemm.cu", "measurements/run1/bench.csv", "sources/index.json"]
    for name in mine:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("the user's")
    for verb in (["clear", "--dry-run"], ["clear"], ["verify", "--delete"], ["list"]):
        code, out, _ = run(capsys, "cache", *verb, "--cache-dir", str(project))
        assert code == 0 and "gemm" not in out and "bench" not in out, (verb, out)
    assert all((project / name).read_text() == "the user's" for name in mine)


def test_show_prints_facts_and_the_trial_table(cache, capsys):
    root, tuned, _ = cache
    code, out, _ = run(capsys, "cache", "show", tuned[:8])
    assert code == 0
    assert f"key              {tuned}" in out or tuned in out
    assert "best config" in out and "status           ok" in out
    assert "block=8" in out and "block=16" in out and "median ms" in out
    assert "*" in out  # the winner is marked
    search = next(line for line in out.splitlines() if line.startswith("search"))
    assert ": done, " in search and " measured, 0 never tried" in search  # how it ran


def test_show_says_what_became_of_the_prior():
    from tileauto.cli._cache_commands import _search_facts

    facts = _search_facts(
        {
            "strategy": "auto(budget=None, prior='priors')",
            "stop_reason": "max_trials",
            "measured": 12,
            "never_tried": 1960,
            "prior": {"matched": ["a.json.gz"], "dropped": ["b.json.gz: no parameter"]},
        }
    )
    assert facts == [
        ("search", "auto(budget=None, prior='priors'): max_trials, 12 measured, 1,960 never tried"),
        ("prior", "1 record(s) used, 1 dropped"),
        ("", "dropped: b.json.gz: no parameter"),
    ]
    alone = _search_facts({"measured": 4, "prior": {"matched": [], "dropped": []}})
    assert alone[-1] == ("prior", "none found (no records of the kernel elsewhere)")


def test_show_a_kernel_entry(cache, capsys):
    _, _, kernel = cache
    code, out, _ = run(capsys, "cache", "show", kernel)
    assert code == 0 and "signature" in out and "main(A: [16, 16] float32" in out


@pytest.mark.parametrize("key", ["ffffffffffff", ""])
def test_show_an_unknown_key_is_a_clear_error(cache, capsys, key):
    code, out, err = run(capsys, "cache", "show", key)
    assert code == (2 if key == "" else 1) and out == ""  # an empty key is a usage error
    assert err.startswith("tileauto: error:") and "tileauto cache list" in err


def test_an_ambiguous_prefix_is_a_clear_error(cache, capsys, tmp_path):
    root, tuned, _ = cache
    twin = root / "autotuner" / (tuned[:4] + "0" * 28)
    shutil.copytree(root / "autotuner" / tuned, twin)
    code, _, err = run(capsys, "cache", "show", tuned[:4])
    assert code == 1 and "matches 2 entries" in err


def test_verify_passes_then_names_each_damaged_entry(cache, capsys):
    root, tuned, kernel = cache
    code, out, _ = run(capsys, "cache", "verify", "-v")
    assert code == 0 and "2 entries checked, 0 bad" in out and out.count("ok ") == 2
    lib = root / "kernels" / kernel / "kernel" / "kernel.so"
    lib.write_bytes(lib.read_bytes()[:10])
    (root / "autotuner" / tuned / "manifest.json").unlink()
    code, out, _ = run(capsys, "cache", "verify")
    assert code == 1 and "2 entries checked, 2 bad" in out
    assert f"BAD      kernels/{kernel}: kernel/kernel.so does not match its sha256" in out
    assert f"BAD      autotuner/{tuned}: no readable manifest" in out
    code, out, _ = run(capsys, "cache", "verify", "--delete")  # found bad entries: 1
    assert code == 1 and out.count("(deleted)") == 2
    code, out, _ = run(capsys, "cache", "verify", "--delete")
    assert code == 0 and "0 entries checked" in out
    code, out, _ = run(capsys, "cache", "list")
    assert "no entries" in out


def test_clear_older_than_keeps_young_entries(cache, capsys):
    root, tuned, kernel = cache
    manifest_path = root / "autotuner" / tuned / "manifest.json"
    data = json.loads(manifest_path.read_text())
    data["created"] = time.time() - 10 * 86400  # ten days old (the manifest is not hashed)
    manifest_path.write_text(json.dumps(data))
    code, out, _ = run(capsys, "cache", "clear", "--older-than", "7d", "--dry-run")
    assert code == 0 and f"would delete autotuner/{tuned}" in out and kernel not in out
    assert (root / "autotuner" / tuned).exists()
    code, out, _ = run(capsys, "cache", "clear", "--older-than", "7d")
    assert code == 0 and "deleted 1 entries older than 7d" in out
    assert not (root / "autotuner" / tuned).exists() and (root / "kernels" / kernel).exists()
    code, out, _ = run(capsys, "cache", "clear")
    assert code == 0 and "deleted 1 entries" in out
    assert not any((root / "kernels").iterdir()) and not any((root / "measurements").iterdir())


CLAIMANT = """
import sys
from pathlib import Path
from tileauto.cache import scratch
claim = scratch.claim_scratch_dir(Path(sys.argv[1]), sys.argv[2])
(claim.path / "build-0").mkdir()
(claim.path / "build-0" / "kernel.so").write_bytes(b"k" * 4096)
print(claim.path, flush=True)
sys.stdin.readline()
"""


def claimant(staging: Path, prefix: str) -> tuple[subprocess.Popen, Path]:
    """A process that claimed a scratch folder, as a tuning does, and waits for its stdin."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CLAIMANT, str(staging), prefix],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    return proc, Path(proc.stdout.readline().strip())


def test_clear_removes_what_killed_runs_left_and_keeps_running_ones(cache, capsys):
    root, tuned, _ = cache
    staging = root / "tmp"
    live, live_dir = claimant(staging, "tune")
    dead, dead_dir = claimant(staging, "proc")
    dead.send_signal(signal.SIGKILL)
    dead.wait(timeout=60)
    interrupted = staging / ".trash-0123456789ab"
    (interrupted / "kernel").mkdir(parents=True)
    (interrupted / "kernel" / "kernel.so").write_bytes(b"t" * 1000)
    try:
        code, out, _ = run(capsys, "cache", "clear", "--kind", "kernels", "--dry-run")
        # 4 KiB of kernel and the claim's few bytes
        assert code == 0 and re.search(
            rf"would remove {re.escape(str(dead_dir))} \(4\.\d KiB\)", out
        )
        assert dead_dir.is_dir()
        code, out, _ = run(capsys, "cache", "clear", "--kind", "kernels")
        assert code == 0 and f"removed {dead_dir} (4." in out
        assert f"KiB): its process (pid {dead.pid}) has ended" in out
        assert f"removed {interrupted} (1000 B): an interrupted delete" in out
        assert re.search(r"removed 2 leftovers of ended runs \(5\.\d KiB\)", out)
        assert "kept" in out and "in use by running processes" in out
        assert not dead_dir.exists() and not interrupted.exists()
        assert (live_dir / "build-0" / "kernel.so").is_file()
        assert (root / "autotuner" / tuned).is_dir()  # --kind kernels: the tuned entry stays
    finally:
        live.stdin.close()
        live.wait(timeout=60)
        dead.stdout.close()
        live.stdout.close()


def test_clear_logs_deletes_logs_not_in_use_and_only_with_logs(cache, capsys):
    root, tuned, kernel = cache
    logs = root / "logs"
    (logs / "workers").mkdir(parents=True, exist_ok=True)
    gone = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process has this id
    old = logs / f"autotune-scale_add-20250101-120000-{gone}.jsonl"
    old_worker = logs / "workers" / f"compile-0-{gone}.log"
    running = logs / "workers" / f"run-cpu-{os.getpid()}.log"  # this process writes it
    for path, days in ((old, 30), (old_worker, 2), (running, 0)):
        path.write_text("log line\n")
        when = time.time() - days * 86400
        os.utime(path, (when, when))
    code, out, _ = run(capsys, "cache", "clear", "--kind", "kernels")
    assert code == 0 and old.exists() and old_worker.exists()  # plain clear keeps the logs
    code, out, _ = run(capsys, "cache", "clear", "--logs", "--older-than", "7d", "--dry-run")
    assert code == 0 and f"would delete {old} (9 B)" in out and str(old_worker) not in out
    assert old.exists()
    code, out, _ = run(capsys, "cache", "clear", "--logs")
    assert code == 0 and "deleted 2 logs (18 B)" in out and "in use" in out
    assert not old.exists() and not old_worker.exists() and running.exists()
    assert (root / "autotuner" / tuned).is_dir()  # --logs deletes logs only


def test_clear_rejects_a_bad_age(cache, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["cache", "clear", "--older-than", "soon"])
    assert exc.value.code == 2
    assert "is not an age" in capsys.readouterr().err


def test_export_then_import_into_another_cache_then_load(cache, capsys, tmp_path, monkeypatch):
    root, tuned, kernel = cache
    shipped = tmp_path / "shipped"
    code, out, _ = run(capsys, "cache", "export", tuned[:10], str(shipped))
    assert code == 0 and f"exported autotuner/{tuned}" in out
    assert disk.verify(shipped) is None
    code, _, err = run(capsys, "cache", "export", tuned, str(shipped))  # not over a folder
    assert code == 1 and "not an empty folder" in err
    # the exported folder loads directly, too
    a = torch.rand(1024)
    torch.testing.assert_close(
        tileauto.AutotuneResult.load_from_disk(shipped).kernel(a), ref_scale_add(a)
    )
    other = tmp_path / "other-cache"
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(other))
    code, out, _ = run(capsys, "cache", "import", str(shipped))
    assert code == 0 and f"imported autotuner/{tuned}" in out and "warning" not in out
    assert disk.verify(other / "autotuner" / tuned) is None
    result = tune_scale_add()  # the imported entry answers: no tuning
    assert result.cache_hit and result.key == tuned


def test_export_trials_writes_self_describing_json(cache, capsys, tmp_path):
    root, tuned, kernel = cache
    out_file = tmp_path / "trials.json"
    code, out, _ = run(capsys, "cache", "export", tuned[:8], "--trials", str(out_file))
    assert code == 0 and f"wrote the trials of autotuner/{tuned}" in out
    doc = json.loads(out_file.read_text())
    assert doc["format"] == "tileauto-trials/1"
    assert (doc["kernel"], doc["key"], doc["kind"]) == ("scale_add", tuned, "autotuner")
    assert doc["device"]["kind"] == "cpu" and doc["versions"]["tileauto"] == tileauto.__version__
    trials = doc["trials"]
    assert [t["index"] for t in trials] == list(range(len(trials))) and len(trials) >= 2
    for t in trials:
        assert {"index", "config", "status", "latency_ms", "compile_s", "run_s", "error"} <= set(t)
        assert t["validation"] in {"default", "skipped"}  # no ref_prog: the default config's
    assert doc["search"]["measured"] == len(trials) and doc["search"]["never_tried"] == 0
    best = trials[doc["best_index"]]
    assert best["status"] == "ok" and best["config"] == doc["best_config"]
    assert best["latency_ms"] == min(t["latency_ms"] for t in trials if t["status"] == "ok")
    result = tileauto.AutotuneResult.load_from_disk(root / "autotuner" / tuned)
    assert best["config"] == result.config
    code, out, _ = run(capsys, "cache", "export", tuned, "--trials", "-")
    assert code == 0 and json.loads(out) == doc
    gz = tmp_path / "trials.json.gz"  # as its name says (it was plain JSON under a .gz name)
    code, _, _ = run(capsys, "cache", "export", tuned, "--trials", str(gz))
    assert code == 0 and json.loads(gzip.decompress(gz.read_bytes())) == doc
    assert RecordedSpace.load(gz).digest == RecordedSpace.load(out_file).digest
    code, _, err = run(capsys, "cache", "export", kernel, "--trials", str(tmp_path / "k.json"))
    assert code == 1 and "no trials" in err and not (tmp_path / "k.json").exists()
    code, _, err = run(capsys, "cache", "export", tuned)
    assert code == 2 and "--trials" in err
    # a folder, or a file in folders not made yet (made, as for DIR)
    code, _, err = run(capsys, "cache", "export", tuned, "--trials", str(tmp_path))
    assert code == 1 and f"--trials {tmp_path} is a folder: expected a file" in err
    deep = tmp_path / "a" / "b" / "t.json"
    assert run(capsys, "cache", "export", tuned, "--trials", str(deep))[0] == 0
    assert json.loads(deep.read_text()) == doc
    code, _, err = run(capsys, "cache", "prior", "scale_add", str(deep))  # DIR is a file
    assert code == 1 and f"{deep} is a file: expected a folder" in err


def test_export_trials_and_show_refuse_an_entry_whose_trials_were_edited(cache, capsys, tmp_path):
    root, tuned, _ = cache
    path = root / "autotuner" / tuned / "trials.json"
    records = json.loads(path.read_text())
    for t in records["trials"]:
        if t["latency"]:
            t["latency"]["median"] = 1e-6  # edited latencies, still valid JSON
    path.write_text(json.dumps(records))
    out_file = tmp_path / "trials.json"
    code, out, err = run(capsys, "cache", "export", tuned, "--trials", str(out_file))
    assert code == 1 and out == "" and not out_file.exists()
    assert f"autotuner/{tuned} does not verify" in err
    assert "trials.json does not match its sha256" in err and "not read" in err
    code, out, _ = run(capsys, "cache", "show", tuned)
    assert code == 1 and "trials.json does not match its sha256" in out
    assert "1e-06" not in out and "median ms" not in out  # no table of edited records


def test_show_plot_draws_the_trials(cache, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    root, tuned, kernel = cache
    image = tmp_path / "trials.png"
    code, out, _ = run(capsys, "cache", "show", tuned, "--plot", str(image))
    assert code == 0 and f"plot: {image}" in out
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = run(capsys, "cache", "show", tuned, "--plot", str(tmp_path / "trials.bmp"))
    assert code == 2 and ".bmp" in err
    code, _, err = run(capsys, "cache", "show", kernel, "--plot", str(image))
    assert code == 1 and "no trials" in err


def test_show_plot_without_matplotlib_names_the_extra(cache, tmp_path):
    root, tuned, _ = cache
    image = tmp_path / "trials.png"
    blocked = (
        "import sys; sys.modules['matplotlib'] = None; "  # as if it were not installed
        "from tileauto.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", blocked, "cache", "show", tuned, "--plot", str(image)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert 'pip install "tileauto[plot]"' in proc.stderr and "Traceback" not in proc.stderr
    assert "best config" in proc.stdout and not image.exists()


def test_import_a_folder_of_entries_and_reject_bad_ones(cache, capsys, tmp_path):
    root, tuned, kernel = cache
    bundle = tmp_path / "bundle"
    for key in (tuned, kernel):
        assert run(capsys, "cache", "export", key, str(bundle / key))[0] == 0
    target = tmp_path / "target-cache"
    code, out, _ = run(capsys, "cache", "import", str(bundle), "--cache-dir", str(target))
    assert code == 0 and out.count("imported") == 2
    assert (target / "kernels" / kernel).is_dir() and (target / "autotuner" / tuned).is_dir()
    (bundle / kernel / "kernel" / "kernel.json").write_text("{}")
    code, _, err = run(capsys, "cache", "import", str(bundle / kernel))
    assert code == 1 and "does not match its sha256" in err and "not imported" in err
    code, _, err = run(capsys, "cache", "import", str(tmp_path / "empty"))
    assert code == 1 and "does not exist" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run(capsys, "cache", "import", str(tmp_path / "empty"))
    assert code == 1 and "holds no tileauto entry" in err
    # a folder with a bad entry among good ones: the good ones are imported, each is named
    fresh = tmp_path / "fresh-cache"
    code, out, err = run(capsys, "cache", "import", str(bundle), "--cache-dir", str(fresh))
    assert code == 1 and "1 of 2 entries" in err and f"imported autotuner/{tuned}" in out
    assert f"not imported {bundle / kernel}: " in out and "does not match its sha256" in out
    assert (fresh / "autotuner" / tuned).is_dir() and not (fresh / "kernels" / kernel).exists()


def test_env_prints_the_effective_settings(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TILEAUTO_AUTO_TUNING_DISABLE_CACHE", "1")
    code, out, _ = run(capsys, "env")
    assert code == 0
    settings = tileauto.Settings.from_env()
    assert settings.env_lines() == out.split("\n\n")[0].splitlines()
    assert "# tuning cache: off" in out and "# kernel cache: on" in out
    assert "is not a tileauto setting" not in out
    monkeypatch.setenv("TILEAUTO_NUM_THREAD", "2")  # a typo is shown, with the likely setting
    with pytest.warns(UserWarning, match="TILEAUTO_NUM_THREAD "):
        code, out, _ = run(capsys, "env")
    assert code == 0
    assert "# TILEAUTO_NUM_THREAD is set but is not a tileauto setting; did you mean " in out
    assert "TILEAUTO_NUM_THREADS?" in out
    monkeypatch.delenv("TILEAUTO_NUM_THREAD")
    monkeypatch.setenv("TILEAUTO_AUTO_TUNING_CPU_UTILITIES", "two")
    code, _, err = run(capsys, "env")
    assert code == 2 and "TILEAUTO_AUTO_TUNING_CPU_UTILITIES='two'" in err


def test_usage_errors_and_help(capsys):
    assert cli.main([]) == 2 and "usage: tileauto" in capsys.readouterr().err
    assert cli.main(["cache"]) == 2 and "list" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["cache", "frobnicate"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["cache", "list", "--help"])
    assert exc.value.code == 0 and "--json" in capsys.readouterr().out


@pytest.mark.slow
def test_python_dash_m_tileauto_runs_the_command(cache):
    root, tuned, _ = cache
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "tileauto", "cache", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and tuned in proc.stdout, proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "tileauto", "cache", "show", "nope"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "no cache entry" in proc.stderr


@pytest.mark.parametrize(
    "where",
    [("--cache-dir", "{dir}", "cache", "list"), ("cache", "--cache-dir", "{dir}", "list")],
    ids=["before-the-command", "before-the-verb"],
)
def test_cache_dir_works_before_the_subcommand(cache, capsys, monkeypatch, tmp_path, where):
    root, tuned, _ = cache
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path / "elsewhere"))  # not the one listed
    code, out, _ = run(capsys, *(a.format(dir=root) for a in where), "--json")
    assert code == 0 and tuned in [d["key"] for d in json.loads(out)]
    # the verb's own --cache-dir still wins when given last
    (tmp_path / "x").mkdir()
    code, out, _ = run(
        capsys, "--cache-dir", str(root), "cache", "list", "--cache-dir", str(tmp_path / "x")
    )
    assert code == 0 and tuned not in out


@pytest.mark.parametrize("plot", ["x.jpg", "missing-folder/x.png"])
def test_show_refuses_a_bad_plot_path_before_showing_the_entry(cache, capsys, tmp_path, plot):
    _, tuned, _ = cache
    code, out, err = run(capsys, "cache", "show", tuned, "--plot", str(tmp_path / plot))
    assert code == 2 and out == ""
    assert "--plot: " in err and ("'.jpg'" in err or "not a folder" in err)


def test_show_prints_a_tuple_config_value_as_a_tuple():
    from tileauto.cli._cache_commands import _format_config
    from tileauto.records import Trial, TrialStatus
    from tileauto.result._values import with_own_values

    best = {"pair": (5, 6), "block": 256}
    assert _format_config(best) == "{'block': 256, 'pair': (5, 6)}"  # not [5, 6]
    assert _format_config({"block": 256}) == '{"block": 256}'
    stored = (Trial(0, {"block": 256, "pair": [5, 6]}, TrialStatus.OK),)
    trials, default = with_own_values(stored, None, best)
    assert trials[0].config == {"block": 256, "pair": (5, 6)} and default is None


def test_env_flags_more_compile_workers_than_cpus(capsys, monkeypatch):
    import tileauto.machine

    monkeypatch.setattr(tileauto.machine, "available_cpus", lambda: 2)
    monkeypatch.setenv("TILEAUTO_AUTO_TUNING_CPU_COUNTS", "64")
    code, out, _ = run(capsys, "env")
    assert "TILEAUTO_AUTO_TUNING_CPU_COUNTS=64" in out
    assert "# warning: a tuning on this machine fails: TILEAUTO_AUTO_TUNING_CPU_COUNTS=64" in out
    monkeypatch.setenv("TILEAUTO_AUTO_TUNING_CPU_COUNTS", "2")
    code, out, _ = run(capsys, "env")
    assert "# compile workers here: 2" in out and "warning" not in out
