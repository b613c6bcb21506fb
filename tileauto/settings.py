"""Every ``TILEAUTO_*`` environment variable, read in one place into a frozen, typed record.

``Settings.from_env()`` is called once per tuning run (or jit compile) and the resulting object
is passed down, so nothing changes in the middle of a run. ``python -m tileauto.settings``
prints the Markdown table that ``docs/env_vars.md`` holds; a test keeps the two equal.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tileauto import machine
from tileauto.errors import SettingsError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{name}={raw!r}: expected a boolean (1/0, true/false, yes/no, on/off)")


def _parse_int(name: str, raw: str, minimum: int) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected an integer >= {minimum}") from None
    if value < minimum and value != -1:
        raise SettingsError(f"{name}={raw!r}: expected -1 (automatic) or an integer >= {minimum}")
    return value


def _parse_threads(name: str, raw: str) -> int:
    value = _parse_int(name, raw, 1)
    if value > machine.available_cpus():
        raise SettingsError(f"{name}={raw!r}: {machine.too_many_threads(value)} (or -1: every CPU)")
    return value


def _parse_tvm_threads(raw: str) -> int:
    # TVM's variable, not ours: a value TVM would ignore is ignored here too, not an error.
    try:
        value = int(raw.strip())
    except ValueError:
        return -1
    cpus = machine.available_cpus()
    if value > cpus:
        # not ours to refuse, and num_threads= may override it: clamped, one warning per value
        warnings.warn(
            f"TVM_NUM_THREADS={raw.strip()} is more than the {cpus} CPUs this process may use: "
            f"tileauto tunes and runs kernels with {cpus} threads; set TILEAUTO_NUM_THREADS or "
            "num_threads= to choose fewer",
            stacklevel=3,
        )
        return cpus
    return value if value > 0 else -1


# TILEAUTO_* names read elsewhere than the settings: the native build's test switch, and the
# variables the test suite hands its child processes
_NOT_SETTINGS = ("TILEAUTO_ALLOW_MISSING_NATIVE", "TILEAUTO_TEST_")


def unknown_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """Each ``TILEAUTO_*`` variable of ``environ`` that no setting reads, with a hint: the
    setting it was probably meant to be, and where the settings are listed."""
    known = {
        n for f in dataclasses.fields(Settings) for n in (f.metadata["env"], *f.metadata["also"])
    }
    unknown = {}
    for name in environ:
        if (
            name.startswith("TILEAUTO_")
            and name not in known
            and not name.startswith(_NOT_SETTINGS)
        ):
            import difflib  # only for a name to explain: a module to compile, at every start

            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
            meant = f"; did you mean {close[0]}?" if close else ""
            unknown[name] = f"{meant} (ignored; `tileauto env` and docs/env_vars.md list them)"
    return unknown


def _parse_fraction(name: str, raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a number in (0, 1], e.g. 0.9") from None
    if not (0.0 < value <= 1.0) or math.isnan(value):
        raise SettingsError(f"{name}={raw!r}: expected a number in (0, 1], e.g. 0.9")
    return value


MAX_SECONDS = 1e6  # a bound of the seconds settings: more overflows a timer or Redis's lease


def _parse_positive_float(name: str, raw: str) -> float:
    expected = f"expected a positive number of seconds, at most {MAX_SECONDS:.0f}"
    try:
        value = float(raw.strip())
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: {expected}") from None
    if not 0 < value <= MAX_SECONDS:
        raise SettingsError(f"{name}={raw!r}: {expected}")
    return value


def _parse_limit(name: str, raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a number >= 0 (0: no limit)") from None
    if not value >= 0 or math.isinf(value):
        raise SettingsError(f"{name}={raw!r}: expected a number >= 0 (0: no limit)")
    return value


def _parse_choice(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise SettingsError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
        return value

    return parse


def parse_folder(name: str, raw: str) -> Path:
    """A folder setting (a variable, or ``--cache-dir``): absolute, never empty nor a file."""
    if not raw.strip():
        raise SettingsError(f"{name} is set but empty: expected a directory path")
    # Absolute now: the run's workers, its exit handlers and the paths it logs must all mean
    # the folder meant when the run started, whatever the process's working directory is later.
    try:
        path = Path(os.path.abspath(Path(raw.strip()).expanduser()))
    except RuntimeError as exc:  # ~user of no such user, or no home to expand ~ to
        raise SettingsError(
            f"{name}={raw!r}: cannot expand {raw.strip().split('/')[0]!r} ({exc}): expected a "
            "folder path"
        ) from None
    if path.exists() and not path.is_dir():
        raise SettingsError(
            f"{name}={raw!r} is a file, not a folder: expected a folder (or a path where one "
            "can be made)"
        )
    return path


def parse_redis_url(name: str, raw: str) -> str | None:
    """A ``redis://`` or ``rediss://`` (TLS) URL with a host; empty: unset."""
    from urllib.parse import urlsplit

    value = raw.strip()
    if not value:
        return None
    try:
        parts = urlsplit(value)
        ok = parts.scheme in ("redis", "rediss") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        ok = False
    if not ok:
        raise SettingsError(
            f"{name}={_masked(raw)!r}: expected redis://host:port/db or rediss://host:port/db (TLS), "
            "e.g. redis://cache.local:6379/0"
        )
    _check_redis_db(name, raw, parts.path, parts.query)
    return value


_SAID_UNKNOWN: set[tuple[str, str]] = set()  # unknown variables warned of, with their values
MIN_LEASE_S = 3.0  # the shortest lease of a key in the fleet's Redis
MIN_LEASE_TIMEOUTS = 3  # a lease outlasts this many remote operations' timeouts


def check_lease(lease_s: float, timeout_s: float, lease: str, timeout: str) -> None:
    """Refuse a lease too short to be renewed: it would lapse while its holder tunes, and
    every waiting process would tune the key too. ``lease`` and ``timeout`` name the two
    values as the caller gave them.

    Raises:
        SettingsError: ``lease_s`` is under :data:`MIN_LEASE_S` or 3 x ``timeout_s``.
    """
    least = max(MIN_LEASE_S, MIN_LEASE_TIMEOUTS * timeout_s)
    if lease_s < least:
        raise SettingsError(
            f"{lease}: {lease_s:g} s is too short a lease to be renewed: expected at least "
            f"{least:g} s ({MIN_LEASE_S:g} s, and {MIN_LEASE_TIMEOUTS} x {timeout}, "
            f"{timeout_s:g} s). A helper process renews it every third of it (it takes a "
            "fraction of a second to start) and each renewal may take the timeout; a lease "
            "that lapses while its holder tunes lets every waiting process tune the key too"
        )


def _default(cls: type, name: str) -> Any:
    """A settings field's default value."""
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def _check_redis_db(name: str, raw: str, path: str, query: str) -> None:
    """The URL's database: a path that is not a number (redis-py reads it as db 0) and a
    ``db=`` argument that disagrees with the path (it wins, while messages show the path)
    would each put a fleet's entries in a database nobody meant."""
    from urllib.parse import parse_qs

    path = path.strip("/")
    if path and not path.isdigit():
        raise SettingsError(
            f"{name}={_masked(raw)!r}: expected the database as a number after the port "
            f"(redis://host:port/0), got {path!r}"
        )
    dbs = parse_qs(query).get("db", [])
    if any(not d.isdigit() for d in dbs) or len(set(map(int, dbs))) > 1:
        raise SettingsError(f"{name}={_masked(raw)!r}: expected db= to be one number, got {dbs}")
    if path and dbs and int(dbs[0]) != int(path):
        raise SettingsError(
            f"{name}={_masked(raw)!r}: the path names database {int(path)} and db= names "
            f"{int(dbs[0])}: give the database once (redis://host:port/{int(dbs[0])})"
        )


def without_password(url: str) -> str:
    """A URL as it may be printed: its password replaced by ``***``, in the user part and in
    a ``password=`` argument (which redis-py reads too)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password:
        user = f"{parts.username}:" if parts.username else ":"
        netloc = f"{user}***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    query = _QUERY_PASSWORD.sub(r"\1***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


_QUERY_PASSWORD = re.compile(r"((?:^|&)password=)[^&]*", re.IGNORECASE)


def _masked(text: str) -> str:
    """Text that may hold a URL which does not parse: anything between ``:`` and ``@`` after
    ``//``, and any ``password=`` value, replaced by ``***`` (an error message may show it)."""
    text = re.sub(r"(//[^/@:]*:)[^@/]*@", r"\1***@", text)
    return re.sub(r"(password=)[^&\s]*", r"\1***", text, flags=re.IGNORECASE)


def _var(
    env: str,
    default: Any,
    parse: Callable[[str, str], Any],
    doc: str,
    also: tuple[str, ...] = (),
    secret: bool = False,
) -> Any:
    # also: other names read when ``env`` is not set (the habits of other tuners' users);
    # secret: never printed (``tileauto env`` shows whether it is set)
    meta = {"env": env, "parse": parse, "doc": doc, "also": also, "secret": secret}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    """The effective tileauto settings. Build with :meth:`from_env`; never mutate."""

    cache_dir: Path = _var(
        "TILEAUTO_CACHE_DIR",
        Path("~/.tileauto/cache").expanduser(),
        parse_folder,
        "Root of the disk cache (tuned kernels under `autotuner/`, jit kernels under `kernels/`). "
        "A relative path (here and in the other folders) is taken from the working directory "
        "when a tuning or compile starts.",
    )
    tmp_dir: Path | None = _var(
        "TILEAUTO_TMP_DIR",
        None,
        parse_folder,
        "Staging directory for builds and cache writes. Default: `$TILEAUTO_CACHE_DIR/tmp`. "
        "It may hold other things: only what tileauto made there (by its exact names and "
        "claim) is ever removed.",
    )
    log_dir: Path | None = _var(
        "TILEAUTO_LOG_DIR",
        None,
        parse_folder,
        "Where tuning logs are written. Default: `$TILEAUTO_CACHE_DIR/logs`. It may hold other "
        "files: only tileauto's logs (`autotune-*.jsonl`, `workers/tileauto-worker-*.log`) "
        "are pruned.",
    )
    log_max_age_days: float = _var(
        "TILEAUTO_LOG_MAX_AGE_DAYS",
        14.0,
        _parse_limit,
        "Days a tuning log or worker log is kept after it was last written; older ones are "
        "deleted when a tuning starts, never the log of a running process. `0`: kept forever.",
    )
    log_max_mb: float = _var(
        "TILEAUTO_LOG_MAX_MB",
        256.0,
        _parse_limit,
        "MiB the logs (logs dir and its `workers/`) may take together; past it, the oldest logs "
        "not in use are deleted when a tuning starts. `0`: no size limit.",
    )
    kernels_max_mb: float = _var(
        "TILEAUTO_KERNELS_MAX_MB",
        2048.0,
        _parse_limit,
        "MiB the kernel cache (`$TILEAUTO_CACHE_DIR/kernels`: `@jit` compiles and every config "
        "a tuning compiled) may take; past it, the entries used longest ago are deleted when a "
        "tuning starts (they are compiled again if needed; tuned results are never deleted). "
        "`0`: no size limit.",
    )
    disable_cache: bool = _var(
        "TILEAUTO_DISABLE_CACHE", False, _parse_bool, "`1` turns every disk cache off."
    )
    autotune_disable_cache: bool = _var(
        "TILEAUTO_AUTO_TUNING_DISABLE_CACHE",
        False,
        _parse_bool,
        "`1` turns off only the tuning cache (jit kernels are still cached).",
    )
    cpu_utilities: float = _var(
        "TILEAUTO_AUTO_TUNING_CPU_UTILITIES",
        0.9,
        _parse_fraction,
        "Fraction of the CPUs this process may use (its affinity mask, and its container's CPU "
        "quota: cgroup `cpu.max`) used for compile workers, in (0, 1].",
    )
    cpu_counts: int = _var(
        "TILEAUTO_AUTO_TUNING_CPU_COUNTS",
        -1,
        lambda n, r: _parse_int(n, r, 1),
        "Exact number of compile workers, at most the CPUs this process may use (with the Ray "
        "executor: the cluster's compile slots); `-1` derives it from the CPU fraction.",
    )
    max_cpu_count: int = _var(
        "TILEAUTO_AUTO_TUNING_MAX_CPU_COUNT",
        -1,
        lambda n, r: _parse_int(n, r, 1),
        "Upper bound on a tuning's compile workers, `TILEAUTO_AUTO_TUNING_CPU_COUNTS` "
        "included (the lower of the two holds); `par_compile(num_workers=...)` given a count "
        "uses that count. `-1` means no bound.",
    )
    disable_autotune: bool = _var(
        "TILEAUTO_DISABLE_AUTOTUNE",
        False,
        _parse_bool,
        "`1` skips tuning: `@autotune` and `AutoTuner.run()` use the default config only "
        "(checked when a check is given), with one warning. `DISABLE_AUTOTUNE=1` (cuTile's "
        "and meTile's name) does the same when this one is unset.",
        also=("DISABLE_AUTOTUNE",),
    )
    default_target: str = _var(
        "TILEAUTO_DEFAULT_TARGET",
        "auto",
        lambda n, r: r.strip() or "auto",
        'Target used when a kernel says `target="auto"` (`auto`, `llvm`, `cuda`, JSON dict).',
    )
    compile_isolation: str = _var(
        "TILEAUTO_COMPILE_ISOLATION",
        "process",
        _parse_choice(("process", "thread")),
        "`process` compiles in killable worker processes; `thread` in threads of this process.",
    )
    compile_timeout_s: float = _var(
        "TILEAUTO_COMPILE_TIMEOUT",
        300.0,
        _parse_positive_float,
        "Seconds a single config may spend compiling before its worker is killed.",
    )
    run_memory_limit_mb: int = _var(
        "TILEAUTO_RUN_MEMORY_LIMIT_MB",
        -1,
        lambda n, r: _parse_int(n, r, 1),
        "Memory (MiB) a run worker may take beyond its size at start before its config is failed "
        "as out of memory, at most the memory of the machine it runs on, or of its container "
        "(cgroup `memory.max`; checked there, a Ray node's too); `-1` allows 90% of the memory "
        "available when it starts.",
    )
    worker_start: str = _var(
        "TILEAUTO_WORKER_START",
        "auto",
        _parse_choice(("auto", "forkserver")),
        "`auto` forks CPU tuning workers from the caller when that is safe (milliseconds), else "
        "starts them from a forkserver (seconds, once); `forkserver` always uses the forkserver.",
    )
    executor: str = _var(
        "TILEAUTO_EXECUTOR",
        "local",
        _parse_choice(("local", "ray")),
        "Where configs are compiled and timed: `local` (worker processes of this machine) or "
        '`ray` (tasks and actors of a Ray cluster: `pip install "tileauto[ray]"`). The '
        "`executor=` option of a tuning wins over it.",
    )
    search_prior: bool = _var(
        "TILEAUTO_SEARCH_PRIOR",
        True,
        _parse_bool,
        "`0`: a tuning's guided search does not start from the trials of the same kernel "
        "tuned before on other targets or devices (the disk cache's entries, and the fleet's "
        "Redis when there is one); a search given `prior=` of its own still uses that.",
    )
    ray_address: str | None = _var(
        "TILEAUTO_RAY_ADDRESS",
        None,
        lambda n, r: r.strip() or None,
        "With the Ray executor: unset starts a local Ray of its own (or joins the one this "
        "process joined, or `RAY_ADDRESS` when set), `auto` joins the cluster running on this "
        "machine, an address (`host:port`, not Ray Client's `ray://`) joins that one; "
        "nothing answering there within 10 s is an error.",
    )
    num_threads: int = _var(
        "TILEAUTO_NUM_THREADS",
        -1,
        _parse_threads,
        "CPU threads kernels are tuned with and run with (the thread-count rule in "
        "`docs/tuning.md`), at most the CPUs this process may use; `-1`: `TVM_NUM_THREADS` "
        "if you set it (clamped to those CPUs, with a warning), else every core of this "
        "process.",
    )
    thread_pool: str = _var(
        "TILEAUTO_THREAD_POOL",
        "tileauto",
        _parse_choice(("tileauto", "tvm")),
        "Which thread pool runs the parallel loops of CPU kernels, in tuning and after: "
        "`tileauto` (its own, which keeps its speed on a busy machine: `docs/tuning.md`) or "
        "`tvm` (TVM's, sized by `TVM_NUM_THREADS`; tileauto then sets that variable to the "
        "kernel's thread count when it loads a parallel kernel, unless you set it).",
    )
    remote_cache: str | None = _var(
        "TILEAUTO_REMOTE_CACHE",
        None,
        parse_redis_url,
        "A Redis that a fleet shares as the second level of the tuning cache "
        "(`redis://host:6379/0`, `rediss://` for TLS, a password in the URL or below): every "
        "tuning looks there before it tunes, one process of the fleet tunes each key, and its "
        'result is published there (`pip install "tileauto[fleet]"`; `docs/scale.md`, Fleet).',
    )
    remote_cache_password: str | None = _var(
        "TILEAUTO_REMOTE_CACHE_PASSWORD",
        None,
        lambda n, r: r or None,
        "The remote cache's password, when its URL has none.",
        secret=True,
    )
    remote_cache_key: str | None = _var(
        "TILEAUTO_REMOTE_CACHE_KEY",
        None,
        lambda n, r: r or None,
        "A secret the fleet shares: entries are signed with it (HMAC-SHA256) and compiled "
        "kernels are shared too, loaded only when their signature verifies. Unset: the remote "
        "cache holds configs and measurements, and a hit compiles its winner locally.",
        secret=True,
    )
    remote_cache_timeout_s: float = _var(
        "TILEAUTO_REMOTE_CACHE_TIMEOUT",
        2.0,
        _parse_positive_float,
        "Seconds each remote cache operation may take (connecting included) before the "
        "tuning goes on with the local cache.",
    )
    remote_cache_lease_s: float = _var(
        "TILEAUTO_REMOTE_CACHE_LEASE",
        15.0,
        _parse_positive_float,
        "Seconds a tuner's lease of a key lives unless renewed (every third of it): a killed "
        "tuner's key is taken over by a waiting process after at most this long.",
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every variable from ``environ`` (default ``os.environ``).

        Raises:
            SettingsError: a variable is set to a value of the wrong kind; the message names it.
        """
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            names = (f.metadata["env"], *f.metadata["also"])
            given = [(env, environ[env]) for env in names if env in environ]
            # an empty name (`ENV X=` in a Dockerfile) leaves the place to an alias that is set
            given = [g for g in given if g[1].strip()] or given[:1]
            if given:
                env, raw = given[0]
                values[f.name] = f.metadata["parse"](env, raw)
        if values.get("num_threads", -1) <= 0 and "TVM_NUM_THREADS" in environ:
            # the caller's own setting for TVM's pool: kernels are tuned with what they run with
            values["num_threads"] = _parse_tvm_threads(environ["TVM_NUM_THREADS"])
        if values.get("remote_cache"):  # a lease too short is refused here, not at first use
            lease = values.get("remote_cache_lease_s", _default(cls, "remote_cache_lease_s"))
            timeout = values.get("remote_cache_timeout_s", _default(cls, "remote_cache_timeout_s"))
            check_lease(
                lease,
                timeout,
                f"TILEAUTO_REMOTE_CACHE_LEASE={lease:g}",
                "TILEAUTO_REMOTE_CACHE_TIMEOUT",
            )
        for name, hint in unknown_variables(environ).items():
            # a typo would otherwise change nothing, silently. Once per process for the
            # process's own environment: settings are read from many places, and Python's
            # once-per-place rule is reset whenever warning filters change (a tuning said it
            # three times)
            said = (name, environ[name])
            if environ is os.environ and said in _SAID_UNKNOWN:
                continue
            if environ is os.environ:
                _SAID_UNKNOWN.add(said)
            warnings.warn(f"{name} is set but is not a tileauto setting{hint}", stacklevel=2)
        return cls(**values)

    @property
    def staging_dir(self) -> Path:
        """The directory for staging files (``TILEAUTO_TMP_DIR`` or ``<cache>/tmp``)."""
        return self.tmp_dir if self.tmp_dir is not None else self.cache_dir / "tmp"

    @property
    def logs_dir(self) -> Path:
        """The directory for tuning logs (``TILEAUTO_LOG_DIR`` or ``<cache>/logs``)."""
        return self.log_dir if self.log_dir is not None else self.cache_dir / "logs"

    @property
    def tuning_cache_enabled(self) -> bool:
        """Whether tuned results are read from and written to disk."""
        return not (self.disable_cache or self.autotune_disable_cache)

    @property
    def kernel_cache_enabled(self) -> bool:
        """Whether plain ``@jit`` compiles are read from and written to disk."""
        return not self.disable_cache

    def compile_workers(
        self, cpu_count: int | None = None, where: str = "CPUs this process may use"
    ) -> int:
        """Number of compile workers the settings allow with ``cpu_count`` CPUs (default: the
        CPUs this process may use; a Ray tuning gives its cluster's compile slots, ``where``
        naming them in the error).

        Raises:
            SettingsError: ``TILEAUTO_AUTO_TUNING_CPU_COUNTS`` is more than those CPUs (checked
                here, where the workers start, not where the variable is read: a Ray node with
                fewer cores reads the driver's variables too).
        """
        cpus = cpu_count if cpu_count is not None else machine.available_cpus()
        if self.cpu_counts > cpus:
            raise SettingsError(
                f"TILEAUTO_AUTO_TUNING_CPU_COUNTS={self.cpu_counts}: {self.cpu_counts} compile "
                f"workers are more than the {cpus} {where}: expected at most "
                f"{cpus} (or -1: TILEAUTO_AUTO_TUNING_CPU_UTILITIES of them)"
            )
        if self.cpu_counts > 0:
            workers = self.cpu_counts
        else:
            workers = max(1, round(cpus * self.cpu_utilities))
        if self.max_cpu_count > 0:
            workers = min(workers, self.max_cpu_count)
        return workers

    def run_memory_limit_bytes(self) -> int | None:
        """``TILEAUTO_RUN_MEMORY_LIMIT_MB`` in bytes, checked against the memory this process
        may use (this machine's, or its container's: :func:`run_memory_limit_bytes`)."""
        return machine.run_memory_limit_bytes(self.run_memory_limit_mb)

    def run_threads(self) -> int:
        """CPU threads kernels are tuned with (the run worker) and run with (the caller).

        The first that is set: the ``num_threads`` option (:meth:`with_num_threads`),
        ``TILEAUTO_NUM_THREADS``, ``TVM_NUM_THREADS`` (both read by :meth:`from_env`), every core.
        """
        return self.num_threads if self.num_threads > 0 else machine.available_cpus()

    def with_num_threads(self, num_threads: int | None) -> Settings:
        """These settings with a kernel's ``num_threads`` option applied (None: unchanged)."""
        if num_threads is None:
            return self
        return dataclasses.replace(self, num_threads=num_threads)

    def env_lines(self) -> list[str]:
        """Every setting as a ``NAME=value`` line that reads back as the same setting (an env
        file, ``env $(...)``), or a ``# NAME ...`` comment where no such line exists: unset, or
        a secret (a password or a key is never printed)."""
        lines = []
        for f in dataclasses.fields(self):
            name, value = f.metadata["env"], getattr(self, f.name)
            if value is None:
                lines.append(f"# {name} unset")
            elif f.metadata["secret"]:
                lines.append(f"# {name} is set (a secret: not shown)")
            elif f.name == "remote_cache" and without_password(value) != value:
                lines.append(f"# {name}={without_password(value)} (its password not shown)")
            elif isinstance(value, bool):
                lines.append(f"{name}={int(value)}")
            else:
                lines.append(f"{name}={value}")
        return lines

    def describe(self) -> dict[str, str]:
        """Every setting by variable name, as the effective value's text."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata["secret"] and value is not None:
                value = "(set)"  # a password or a key is never printed
            elif f.name == "remote_cache" and value is not None:
                value = without_password(value)
            out[f.metadata["env"]] = str(value)
        return out


def markdown_table() -> str:
    """The Markdown page of every variable, generated from :class:`Settings`."""
    lines = [
        "# Environment variables",
        "",
        "Generated by `python -m tileauto.settings`; do not edit by hand.",
        "",
        "A `TILEAUTO_*` variable that no setting reads is a warning that names the setting it",
        "was probably meant to be (a typo otherwise changes nothing); `tileauto env` lists them.",
        "",
        "| variable | default | meaning |",
        "| --- | --- | --- |",
    ]
    for f in dataclasses.fields(Settings):
        default = f.default
        shown = "unset" if default is None else f"`{default}`"
        if isinstance(default, Path):
            shown = "`~/.tileauto/cache`"
        names = ", ".join(f"`{n}`" for n in (f.metadata["env"], *f.metadata["also"]))
        lines.append(f"| {names} | {shown} | {f.metadata['doc']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - exercised by the docs test through a subprocess
    sys.stdout.write(markdown_table())
