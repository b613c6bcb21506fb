"""Tests of tileauto.settings: every TILEAUTO_* variable, compile_workers(), paths and the docs page."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tileauto.errors import SettingsError, TileautoError
from tileauto.machine import available_cpus
from tileauto.settings import Settings, markdown_table

ROOT = Path(__file__).resolve().parents[2]

ALL_VARS = {
    "TILEAUTO_CACHE_DIR",
    "TILEAUTO_TMP_DIR",
    "TILEAUTO_LOG_DIR",
    "TILEAUTO_LOG_MAX_AGE_DAYS",
    "TILEAUTO_LOG_MAX_MB",
    "TILEAUTO_KERNELS_MAX_MB",
    "TILEAUTO_SEARCH_PRIOR",
    "TILEAUTO_DISABLE_CACHE",
    "TILEAUTO_AUTO_TUNING_DISABLE_CACHE",
    "TILEAUTO_AUTO_TUNING_CPU_UTILITIES",
    "TILEAUTO_AUTO_TUNING_CPU_COUNTS",
    "TILEAUTO_AUTO_TUNING_MAX_CPU_COUNT",
    "TILEAUTO_DISABLE_AUTOTUNE",
    "TILEAUTO_DEFAULT_TARGET",
    "TILEAUTO_COMPILE_ISOLATION",
    "TILEAUTO_COMPILE_TIMEOUT",
    "TILEAUTO_RUN_MEMORY_LIMIT_MB",
    "TILEAUTO_NUM_THREADS",
    "TILEAUTO_WORKER_START",
    "TILEAUTO_EXECUTOR",
    "TILEAUTO_RAY_ADDRESS",
    "TILEAUTO_THREAD_POOL",
    "TILEAUTO_REMOTE_CACHE",
    "TILEAUTO_REMOTE_CACHE_PASSWORD",
    "TILEAUTO_REMOTE_CACHE_KEY",
    "TILEAUTO_REMOTE_CACHE_TIMEOUT",
    "TILEAUTO_REMOTE_CACHE_LEASE",
}

BOOL_FIELDS = {
    "TILEAUTO_DISABLE_CACHE": "disable_cache",
    "TILEAUTO_AUTO_TUNING_DISABLE_CACHE": "autotune_disable_cache",
    "TILEAUTO_DISABLE_AUTOTUNE": "disable_autotune",
}
INT_FIELDS = {
    "TILEAUTO_AUTO_TUNING_CPU_COUNTS": "cpu_counts",
    "TILEAUTO_AUTO_TUNING_MAX_CPU_COUNT": "max_cpu_count",
    "TILEAUTO_RUN_MEMORY_LIMIT_MB": "run_memory_limit_mb",
    "TILEAUTO_NUM_THREADS": "num_threads",
}
PATH_FIELDS = {
    "TILEAUTO_CACHE_DIR": "cache_dir",
    "TILEAUTO_TMP_DIR": "tmp_dir",
    "TILEAUTO_LOG_DIR": "log_dir",
}


def settings(**env: str) -> Settings:
    return Settings.from_env(env)


def test_every_variable_is_a_field_and_vice_versa():
    names = {f.metadata["env"] for f in dataclasses.fields(Settings)}
    assert names == ALL_VARS
    for f in dataclasses.fields(Settings):
        assert f.metadata["doc"].strip(), f"{f.metadata['env']} has no documentation"


def test_package_reads_no_undeclared_variable():
    """Every TILEAUTO_* name in the package source is a declared setting (one place reads them)."""
    mentioned = set()
    for path in (ROOT / "tileauto").rglob("*.py"):
        mentioned |= set(re.findall(r"TILEAUTO_[A-Z0-9_]*[A-Z0-9]", path.read_text()))
    prefixes = {"TILEAUTO_AUTO_TUNING"}  # prose mentions a family of variables
    # the names the unknown-variable warning leaves alone (read by the tests, not the package)
    prefixes |= {"TILEAUTO_TEST", "TILEAUTO_ALLOW_MISSING_NATIVE"}
    assert mentioned - ALL_VARS - prefixes == set()


def test_defaults_without_environment():
    s = settings()
    assert s.cache_dir == Path.home() / ".tileauto" / "cache"
    assert s.tmp_dir is None and s.log_dir is None
    assert s.staging_dir == s.cache_dir / "tmp"
    assert s.logs_dir == s.cache_dir / "logs"
    assert s.disable_cache is False and s.autotune_disable_cache is False
    assert s.disable_autotune is False
    assert s.cpu_utilities == 0.9
    assert s.cpu_counts == -1 and s.max_cpu_count == -1 and s.num_threads == -1
    assert s.default_target == "auto"
    assert s.compile_isolation == "process"
    assert s.compile_timeout_s == 300.0
    assert s.log_max_age_days == 14.0 and s.log_max_mb == 256.0
    assert s.tuning_cache_enabled and s.kernel_cache_enabled


def test_from_env_reads_os_environ_by_default(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("TILEAUTO_AUTO_TUNING_CPU_COUNTS", "3")
    s = Settings.from_env()
    assert s.cache_dir == tmp_path / "c"
    assert s.cpu_counts == 3


def test_conftest_isolates_the_cache_dir(tileauto_env):
    assert os.environ["TILEAUTO_CACHE_DIR"] == str(tileauto_env)
    assert Settings.from_env().cache_dir == tileauto_env
    leaked = [k for k in os.environ if k.startswith("TILEAUTO_") and k != "TILEAUTO_CACHE_DIR"]
    assert leaked in ([], ["TILEAUTO_ALLOW_MISSING_NATIVE"])


def test_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings().cpu_counts = 4  # type: ignore[misc]


# -- paths ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("var", sorted(PATH_FIELDS))
def test_path_variables(var, tmp_path):
    s = settings(**{var: str(tmp_path / "x")})
    assert getattr(s, PATH_FIELDS[var]) == tmp_path / "x"


def test_paths_expand_user():
    s = settings(TILEAUTO_CACHE_DIR="~/somewhere")
    assert s.cache_dir == Path.home() / "somewhere"


@pytest.mark.parametrize("var", sorted(PATH_FIELDS))
def test_a_home_of_no_such_user_is_an_error_naming_the_variable(var):
    """It was a RuntimeError out of pathlib (a traceback from `tileauto env`)."""
    with pytest.raises(SettingsError, match=rf"{var}='~nosuchuser-x9/cache': cannot expand"):
        settings(**{var: "~nosuchuser-x9/cache"})


def test_a_path_loses_the_spaces_around_it_as_every_other_setting(tmp_path):
    """``TILEAUTO_CACHE_DIR="/data/cache "`` used a folder whose name ends in a space."""
    assert settings(TILEAUTO_CACHE_DIR=f" {tmp_path}/c ").cache_dir == tmp_path / "c"


@pytest.mark.parametrize("var", sorted(PATH_FIELDS))
def test_a_relative_path_is_made_absolute_when_read(var, tmp_path, monkeypatch):
    # a program that changes directory after a run started must not move the run's folders
    monkeypatch.chdir(tmp_path)
    s = settings(**{var: "rel/../here"})
    monkeypatch.chdir("/")
    assert getattr(s, PATH_FIELDS[var]) == tmp_path / "here"


@pytest.mark.parametrize("var", sorted(PATH_FIELDS))
def test_a_folder_variable_naming_a_file_is_an_error_naming_it(var, tmp_path):
    # was: two warnings about "<file>/.locks" and "<file>/measurements", and nothing cached
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SettingsError, match=rf"{var}=.*a-file.* is a file, not a folder"):
        settings(**{var: str(tmp_path / "a-file")})


def test_staging_and_logs_follow_cache_dir_unless_set(tmp_path):
    s = settings(TILEAUTO_CACHE_DIR=str(tmp_path))
    assert s.staging_dir == tmp_path / "tmp"
    assert s.logs_dir == tmp_path / "logs"
    s = settings(
        TILEAUTO_CACHE_DIR=str(tmp_path),
        TILEAUTO_TMP_DIR=str(tmp_path / "stage"),
        TILEAUTO_LOG_DIR=str(tmp_path / "log"),
    )
    assert s.staging_dir == tmp_path / "stage"
    assert s.logs_dir == tmp_path / "log"


@pytest.mark.parametrize("var", sorted(PATH_FIELDS))
@pytest.mark.parametrize("raw", ["", "   "])
def test_empty_path_is_an_error(var, raw):
    with pytest.raises(SettingsError, match=var):
        settings(**{var: raw})


# -- booleans -------------------------------------------------------------------------------------


@pytest.mark.parametrize("var", sorted(BOOL_FIELDS))
@pytest.mark.parametrize(
    "raw, expected",
    [
        ("1", True),
        ("true", True),
        ("True", True),
        (" YES ", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("no", False),
        ("OFF", False),
        ("", False),
    ],
)
def test_bool_variables(var, raw, expected):
    assert getattr(settings(**{var: raw}), BOOL_FIELDS[var]) is expected


@pytest.mark.parametrize("var", sorted(BOOL_FIELDS))
@pytest.mark.parametrize("raw", ["2", "maybe", "-1", "enabled"])
def test_bad_bool_names_the_variable(var, raw):
    with pytest.raises(SettingsError, match=var) as info:
        settings(**{var: raw})
    assert repr(raw) in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TileautoError)


def test_cache_switches():
    s = settings(TILEAUTO_DISABLE_CACHE="1")
    assert not s.tuning_cache_enabled and not s.kernel_cache_enabled
    s = settings(TILEAUTO_AUTO_TUNING_DISABLE_CACHE="1")
    assert not s.tuning_cache_enabled and s.kernel_cache_enabled


def test_disable_autotune_is_read_under_cutile_and_metile_name_too():
    assert settings(DISABLE_AUTOTUNE="1").disable_autotune
    assert not settings(DISABLE_AUTOTUNE="1", TILEAUTO_DISABLE_AUTOTUNE="0").disable_autotune
    with pytest.raises(SettingsError, match="DISABLE_AUTOTUNE='maybe'"):
        settings(DISABLE_AUTOTUNE="maybe")


def test_an_empty_variable_leaves_the_place_to_its_other_name_that_is_set():
    """``ENV TILEAUTO_DISABLE_AUTOTUNE=`` (empty) hid ``DISABLE_AUTOTUNE=1``."""
    assert settings(TILEAUTO_DISABLE_AUTOTUNE="", DISABLE_AUTOTUNE="1").disable_autotune
    assert not settings(TILEAUTO_DISABLE_AUTOTUNE="").disable_autotune


# -- integers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("var", sorted(INT_FIELDS))
@pytest.mark.parametrize("raw, expected", [("1", 1), ("4", 4), (" 16 ", 16), ("-1", -1)])
def test_int_variables(var, raw, expected, monkeypatch):
    # a thread count is bounded by the process's CPUs: the parsing, not this machine, is tested
    monkeypatch.setattr("tileauto.machine.available_cpus", lambda: 64)
    assert getattr(settings(**{var: raw}), INT_FIELDS[var]) == expected


@pytest.mark.parametrize("var", sorted(INT_FIELDS))
@pytest.mark.parametrize("raw", ["abc", "2.5", "", "0", "-2", "1e3"])
def test_bad_int_names_the_variable(var, raw):
    with pytest.raises(SettingsError, match=var) as info:
        settings(**{var: raw})
    assert repr(raw) in str(info.value)


# -- the CPU fraction -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected", [("0.5", 0.5), ("1", 1.0), (" 0.25 ", 0.25), ("1e-1", 0.1)]
)
def test_cpu_utilities(raw, expected):
    assert settings(TILEAUTO_AUTO_TUNING_CPU_UTILITIES=raw).cpu_utilities == expected


@pytest.mark.parametrize("raw", ["abc", "1.7", "0", "-0.5", "nan", "inf", ""])
def test_bad_cpu_utilities_names_the_variable(raw):
    with pytest.raises(SettingsError, match="TILEAUTO_AUTO_TUNING_CPU_UTILITIES") as info:
        settings(TILEAUTO_AUTO_TUNING_CPU_UTILITIES=raw)
    assert repr(raw) in str(info.value)
    assert "(0, 1]" in str(info.value)


# -- the other variables --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [("", "auto"), ("auto", "auto"), (" llvm ", "llvm"), ('{"kind": "llvm"}', '{"kind": "llvm"}')],
)
def test_default_target(raw, expected):
    assert settings(TILEAUTO_DEFAULT_TARGET=raw).default_target == expected


@pytest.mark.parametrize("raw, expected", [("thread", "thread"), (" PROCESS ", "process")])
def test_compile_isolation(raw, expected):
    assert settings(TILEAUTO_COMPILE_ISOLATION=raw).compile_isolation == expected


@pytest.mark.parametrize("raw", ["fork", "", "threads"])
def test_bad_compile_isolation(raw):
    with pytest.raises(SettingsError, match="TILEAUTO_COMPILE_ISOLATION") as info:
        settings(TILEAUTO_COMPILE_ISOLATION=raw)
    assert "process" in str(info.value) and "thread" in str(info.value)


@pytest.mark.parametrize(
    "raw, expected",
    [("auto", "auto"), ("forkserver", "forkserver"), (" Forkserver ", "forkserver")],
)
def test_worker_start(raw, expected):
    assert settings().worker_start == "auto"
    assert settings(TILEAUTO_WORKER_START=raw).worker_start == expected


@pytest.mark.parametrize("raw", ["fork", "spawn", ""])
def test_bad_worker_start(raw):
    with pytest.raises(SettingsError, match="TILEAUTO_WORKER_START") as info:
        settings(TILEAUTO_WORKER_START=raw)
    assert "auto" in str(info.value) and "forkserver" in str(info.value)


@pytest.mark.parametrize("raw, expected", [("10", 10.0), ("0.5", 0.5), (" 2 ", 2.0)])
def test_compile_timeout(raw, expected):
    assert settings(TILEAUTO_COMPILE_TIMEOUT=raw).compile_timeout_s == expected


@pytest.mark.parametrize("raw", ["0", "-1", "abc", "inf", "nan", "", "1e300", "1000001"])
def test_bad_compile_timeout(raw):
    with pytest.raises(SettingsError, match="TILEAUTO_COMPILE_TIMEOUT"):
        settings(TILEAUTO_COMPILE_TIMEOUT=raw)


@pytest.mark.parametrize("var", ["TILEAUTO_REMOTE_CACHE_TIMEOUT", "TILEAUTO_REMOTE_CACHE_LEASE"])
def test_seconds_past_what_a_timer_or_redis_takes_are_refused(var):
    """1e300 passed, then failed far away as "cannot reach redis" (an OverflowError) or a
    lease Redis refused, and the fleet went off silently."""
    with pytest.raises(SettingsError, match=rf"{var}='1e300': .* at most 1000000"):
        settings(**{var: "1e300"})
    assert settings(**{var: "1000000"})


LOG_LIMITS = {"TILEAUTO_LOG_MAX_AGE_DAYS": "log_max_age_days", "TILEAUTO_LOG_MAX_MB": "log_max_mb"}


@pytest.mark.parametrize("var", sorted(LOG_LIMITS))
@pytest.mark.parametrize("raw, expected", [("0", 0.0), ("7", 7.0), (" 0.5 ", 0.5), ("1e3", 1e3)])
def test_log_limits(var, raw, expected):
    assert getattr(settings(**{var: raw}), LOG_LIMITS[var]) == expected


@pytest.mark.parametrize("var", sorted(LOG_LIMITS))
@pytest.mark.parametrize("raw", ["-1", "abc", "inf", "nan", ""])
def test_bad_log_limit_names_the_variable(var, raw):
    with pytest.raises(SettingsError, match=var) as info:
        settings(**{var: raw})
    assert "0: no limit" in str(info.value)


def test_unrelated_variables_are_ignored():
    s = settings(HOME="/nowhere", PATH="", TILEAUTO_TEST_SPACE="x")
    assert s == settings()


def test_a_tileauto_variable_no_setting_reads_is_a_warning_with_the_likely_one():
    # a typo changed nothing, and nothing said so
    with pytest.warns(UserWarning, match=r"TILEAUTO_CACHEDIR .* did you mean TILEAUTO_CACHE_DIR\?"):
        s = settings(TILEAUTO_CACHEDIR="/elsewhere")
    assert s == settings()
    with pytest.warns(
        UserWarning, match=r"TILEAUTO_UNKNOWN is set but is not a tileauto setting \("
    ):
        settings(TILEAUTO_UNKNOWN="x")


def test_an_unknown_variable_of_the_process_is_said_once(monkeypatch):
    # a tuning reads the settings from many places: it said the same typo three times
    import warnings

    import tileauto.settings as settings_module

    monkeypatch.setattr(settings_module, "_SAID_UNKNOWN", set())
    monkeypatch.setenv("TILEAUTO_AUTOTUNING_CPU_COUNTS", "1")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for _ in range(3):
            Settings.from_env()
    assert [str(w.message).split(" is set")[0] for w in said] == ["TILEAUTO_AUTOTUNING_CPU_COUNTS"]
    monkeypatch.setenv("TILEAUTO_AUTOTUNING_CPU_COUNTS", "2")  # another value: said again
    with pytest.warns(UserWarning, match="TILEAUTO_AUTOTUNING_CPU_COUNTS is set"):
        Settings.from_env()


# -- compile_workers() and run_threads() ----------------------------------------------------------


@pytest.mark.parametrize(
    "env, cpus, expected",
    [
        ({}, 2, 2),  # round(0.9 * 2) = 2
        ({}, 10, 9),
        ({}, 1, 1),
        ({}, 64, 58),
        ({"TILEAUTO_AUTO_TUNING_CPU_UTILITIES": "0.5"}, 8, 4),
        ({"TILEAUTO_AUTO_TUNING_CPU_UTILITIES": "0.1"}, 2, 1),  # never below one worker
        ({"TILEAUTO_AUTO_TUNING_CPU_UTILITIES": "1"}, 16, 16),
        ({"TILEAUTO_AUTO_TUNING_CPU_COUNTS": "3"}, 64, 3),  # an exact count wins
        ({"TILEAUTO_AUTO_TUNING_CPU_COUNTS": "-1"}, 10, 9),
        ({"TILEAUTO_AUTO_TUNING_MAX_CPU_COUNT": "4"}, 64, 4),
        ({"TILEAUTO_AUTO_TUNING_MAX_CPU_COUNT": "4"}, 2, 2),
        ({"TILEAUTO_AUTO_TUNING_MAX_CPU_COUNT": "-1"}, 64, 58),
        (
            {"TILEAUTO_AUTO_TUNING_CPU_COUNTS": "6", "TILEAUTO_AUTO_TUNING_MAX_CPU_COUNT": "2"},
            64,
            2,
        ),
        (
            {
                "TILEAUTO_AUTO_TUNING_CPU_UTILITIES": "0.5",
                "TILEAUTO_AUTO_TUNING_MAX_CPU_COUNT": "3",
            },
            16,
            3,
        ),
    ],
)
def test_compile_workers(env, cpus, expected):
    assert settings(**env).compile_workers(cpus) == expected


def test_more_compile_workers_than_cpus_is_an_error_naming_the_variable():
    s = settings(TILEAUTO_AUTO_TUNING_CPU_COUNTS="8")  # read anywhere: a node may have fewer
    with pytest.raises(SettingsError, match="TILEAUTO_AUTO_TUNING_CPU_COUNTS=8: 8 compile work"):
        s.compile_workers(2)  # checked where the workers start
    assert s.compile_workers(8) == 8
    too_many = settings(TILEAUTO_AUTO_TUNING_CPU_COUNTS=str(available_cpus() + 1))
    with pytest.raises(SettingsError, match="more than the"):
        too_many.compile_workers()


def test_a_run_memory_limit_above_the_machines_memory_is_an_error_naming_the_variable():
    import psutil

    from tileauto.machine import run_memory_limit_bytes

    total_mb = psutil.virtual_memory().total // 2**20
    assert settings().run_memory_limit_bytes() is None  # -1: 90% of what is available
    assert settings(TILEAUTO_RUN_MEMORY_LIMIT_MB="1500").run_memory_limit_bytes() == 1500 * 2**20
    huge = settings(TILEAUTO_RUN_MEMORY_LIMIT_MB=str(total_mb + 1))  # read anywhere
    with pytest.raises(
        SettingsError,
        match=rf"TILEAUTO_RUN_MEMORY_LIMIT_MB={total_mb + 1}: more than the {total_mb} MiB of "
        rf"memory of this machine: expected at most {total_mb}",
    ):
        huge.run_memory_limit_bytes()  # checked where the run worker starts
    with pytest.raises(SettingsError, match="of the Ray node n1: expected at most 1024"):
        run_memory_limit_bytes(2000, 2**30, "the Ray node n1")


def test_compile_workers_defaults_to_available_cpus():
    s = settings(TILEAUTO_AUTO_TUNING_CPU_UTILITIES="1")
    assert s.compile_workers() == available_cpus() >= 1


def test_available_cpus_respects_affinity():
    assert available_cpus() == len(os.sched_getaffinity(0))


def test_run_threads():
    assert settings(TILEAUTO_NUM_THREADS="1").run_threads() == 1
    assert settings().run_threads() == available_cpus()


def test_num_threads_above_the_process_cpus_is_refused():
    cpus = available_cpus()
    assert settings(TILEAUTO_NUM_THREADS=str(cpus)).run_threads() == cpus
    for raw in (str(cpus + 1), "1000000"):
        with pytest.raises(SettingsError, match=f"TILEAUTO_NUM_THREADS='{raw}'") as info:
            settings(TILEAUTO_NUM_THREADS=raw)
        assert f"more than the {cpus} CPUs this process may use" in str(info.value)
        assert f"expected at most {cpus} (or -1: every CPU)" in str(info.value)


def test_tvm_num_threads_above_the_process_cpus_is_clamped_with_a_warning():
    cpus = available_cpus()
    with pytest.warns(UserWarning, match=f"TVM_NUM_THREADS=1000000 is more than the {cpus} CPUs"):
        assert settings(TVM_NUM_THREADS="1000000").run_threads() == cpus
    assert settings(TVM_NUM_THREADS="1000000", TILEAUTO_NUM_THREADS="1").run_threads() == 1


def test_thread_pool_choice():
    assert settings().thread_pool == "tileauto"
    assert settings(TILEAUTO_THREAD_POOL="tvm").thread_pool == "tvm"
    with pytest.raises(SettingsError, match="TILEAUTO_THREAD_POOL"):
        settings(TILEAUTO_THREAD_POOL="openmp")


def test_describe_names_every_variable():
    described = settings(TILEAUTO_AUTO_TUNING_CPU_COUNTS="5").describe()
    assert set(described) == ALL_VARS
    assert described["TILEAUTO_AUTO_TUNING_CPU_COUNTS"] == "5"


def test_env_lines_read_back_as_the_same_settings(tmp_path):
    """`tileauto env` printed unset settings as `None` and bools as `True`: fed back (an env
    file, `env $(tileauto env)`), `TILEAUTO_REMOTE_CACHE=None` was refused, the staging dir
    became `./None`, and the fleet's password and key the text "None"."""
    given = settings(
        TILEAUTO_CACHE_DIR=str(tmp_path / "c"),
        TILEAUTO_DISABLE_CACHE="1",
        TILEAUTO_REMOTE_CACHE="redis://:pw@127.0.0.1:1/0",
        TILEAUTO_REMOTE_CACHE_KEY="k" * 32,
    )
    lines = given.env_lines()
    environ = dict(line.split("=", 1) for line in lines if not line.startswith("#"))
    again = Settings.from_env(environ)
    kept = {"remote_cache", "remote_cache_key"}  # not printed: a password, a key
    for f in dataclasses.fields(Settings):
        if f.name not in kept:
            assert getattr(again, f.name) == getattr(given, f.name), f.name
    assert "# TILEAUTO_REMOTE_CACHE_KEY is set (a secret: not shown)" in lines
    assert not any("pw" in line for line in lines)
    assert "# TILEAUTO_TMP_DIR unset" in lines and "TILEAUTO_DISABLE_CACHE=1" in lines


# -- the docs page --------------------------------------------------------------------------------


def test_markdown_table_lists_every_variable():
    table = markdown_table()
    for name in ALL_VARS:
        assert f"| `{name}` |" in table or f"| `{name}`, " in table
    assert "`~/.tileauto/cache`" in table
    assert str(Path.home()) not in table  # no machine-specific default in the docs


def test_docs_env_vars_md_is_generated_output():
    """docs/env_vars.md must equal ``python -m tileauto.settings``; regenerate it if this fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "tileauto.settings"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    docs = (ROOT / "docs" / "env_vars.md").read_text()
    assert proc.stdout == docs, (
        "docs/env_vars.md is stale: run `python -m tileauto.settings > docs/env_vars.md`"
    )
    assert markdown_table() == docs
