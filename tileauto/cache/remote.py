"""The remote level of the tuning cache: one Redis that a fleet of machines shares.

    tileauto:r1:entry:<key>     a hash: ``record`` (JSON: the entry's records, its target and
                                versions), ``sha256``, and with a signing key ``hmac``,
                                ``kernel`` (the compiled kernel's files) and ``kernel_hmac``
    tileauto:r1:lease:<key>     who tunes ``<key>`` now (:mod:`tileauto.cache._lease`)
    tileauto:r1:done:<key>      a channel: the lease's waiters are woken when it is published
    tileauto:r1:family:<id>     the keys of one factory and problem on every device

``<key>`` is the disk entry's key. A record carries configs and measurements only: loading
it never runs code from the database. A kernel is shared only under the operator's key
(HMAC-SHA256, verified before it is written to disk). A damaged entry is a miss with one
warning; a record signed under another key is used as unsigned (one warning); an entry of
another format or version is ignored. Every operation has a short time limit, and a failure
is one warning naming the address: tuning goes on locally (a waiter first reconnects).
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import numbers
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.artifact import KernelArtifact
from tileauto.cache import _signing, disk
from tileauto.cache._lease import Holder, Lease
from tileauto.cache.entry import KERNEL_DIR, config_of
from tileauto.cache.key import versions
from tileauto.errors import SettingsError
from tileauto.records import Trial
from tileauto.settings import (
    MAX_SECONDS,
    check_lease,
    parse_redis_url,
)
from tileauto.space import config_id

log = get_logger("cache")

FORMAT = 1  # the remote record's format: another one is ignored (docs/cache_format.md)
PREFIX = f"tileauto:r{FORMAT}"
RECORD_FILES = ("best_config.json", "latency.json", "trials.json", "problem.json")
KERNEL_FILES = (*KernelArtifact.FILES, KernelArtifact.META)
_INSTALL = 'the remote cache needs the redis client: pip install "tileauto[fleet]"'
_BAD_SIGNATURE = (
    "its signature does not verify under TILEAUTO_REMOTE_CACHE_KEY (another key signed it): "
    "its configs are used and its winner is compiled here, its kernel is not loaded"
)
RECONNECT_FIRST_S = 0.05  # a waiter's first pause after a dropped connection (then doubled)
RECONNECT_MAX_S = 1.0
# the shortest lease: renewed every third of it by a helper process that takes a fraction of
# a second to start (seconds on a loaded machine), each renewal taking up to the timeout


def check_url(url: Any, source: str) -> str:
    """``url`` if it is a ``redis://`` or ``rediss://`` address with a host.

    Raises:
        SettingsError: it is not (the message names ``source``, what came and what is expected).
    """
    if not isinstance(url, str):
        raise SettingsError(f"{source}: expected a redis:// URL, got {type(url).__name__}")
    checked = parse_redis_url(source, url)
    if checked is None:
        raise SettingsError(f"{source}: expected a redis:// URL, got an empty string")
    return checked


def check_seconds(value: Any, source: str) -> float:
    """``value`` as seconds: a finite number in (0, :data:`~tileauto.settings.MAX_SECONDS`].

    Raises:
        SettingsError: it is not (the message names ``source``, what came and what is expected).
    """
    expected = f"expected a positive number of seconds, at most {MAX_SECONDS:.0f}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SettingsError(f"{source}: {expected}, got {type(value).__name__} {value!r}")
    seconds = float(value)
    if not (0 < seconds <= MAX_SECONDS and math.isfinite(seconds)):
        raise SettingsError(f"{source}: {expected}, got {value!r}")
    return seconds


def shown_address(url: str) -> str:
    """The URL as messages show it: without its password."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class RemoteEntry:
    """A remote entry, checked: its record, and its kernel's files when signed under our key."""

    key: str
    record: dict[str, Any]
    kernel: dict[str, bytes] | None
    size_bytes: int
    signed: bool  # the record's HMAC verified under this process's key
    note: str | None = None  # a warning: its signature does not verify, used as unsigned

    @property
    def config(self) -> dict[str, Any]:
        return config_of(self.record["files"]["best_config.json"])

    @property
    def latency_ms(self) -> float | None:
        latency = self.record["files"]["latency.json"].get("latency_ms")
        return float(latency) if latency is not None else None

    @property
    def default(self) -> Trial | None:
        """The default config's trial (None: not measured)."""
        stored = self.record["files"]["trials.json"].get("default")
        return Trial.from_json(stored) if stored else None

    def trials(self, with_default: bool = True) -> list[Trial]:
        """Every trial the entry stores, the default config's included once: a default that
        is also one of the configs is stored twice (as a config and as the default), and the
        search must not count its measurement twice. ``with_default=False``: the configs'
        trials alone (a table shows the default in a row of its own)."""
        stored = self.record["files"]["trials.json"]
        out = [Trial.from_json(t) for t in stored.get("trials", ())]
        default = self.default if with_default else None
        if default is not None and config_id(default.config) not in {
            config_id(t.config) for t in out
        }:
            out.append(default)
        return out

    def write_records(self, out: Path) -> None:
        """Write the entry's record files into a staged entry folder ``out``."""
        for name, data in self.record["files"].items():
            if name in RECORD_FILES and data is not None:
                (out / name).write_text(json.dumps(data, indent=1, sort_keys=True, default=repr))

    def write_kernel(self, out: Path) -> None:
        """Write the signed kernel's files into ``out/kernel/``."""
        assert self.kernel is not None
        kernel_dir = out / KERNEL_DIR
        kernel_dir.mkdir()
        for name, data in self.kernel.items():
            (kernel_dir / name).write_bytes(data)


@dataclass(frozen=True)
class ForeignTrials:
    """The trials one remote entry measured on another device (the search's transfer)."""

    key: str
    target: str
    device: dict[str, Any]
    trials: tuple[Trial, ...]


class RemoteCache:
    """One Redis as the fleet's level of the tuning cache.

    Args:
        url: ``redis://[:password@]host:port/db`` or ``rediss://`` (TLS).
        password: used when the URL has none (``TILEAUTO_REMOTE_CACHE_PASSWORD``).
        signing_key: shares compiled kernels, signed with it (``TILEAUTO_REMOTE_CACHE_KEY``).
        timeout_s: the time limit of each operation (connecting included).
        lease_s: how long a tuner's lease lives without renewal (a killed tuner's key is
            taken over after it): at least 3 s and 3 x ``timeout_s``.

    Raises:
        SettingsError: a URL that is not ``redis://`` or ``rediss://``; a time that is not
            a positive number of seconds, or a lease too short to be renewed.
    """

    def __init__(
        self,
        url: str,
        *,
        password: str | None = None,
        signing_key: str | bytes | None = None,
        timeout_s: float = 2.0,
        lease_s: float = 15.0,
    ) -> None:
        self.url = check_url(url, "url")
        timeout_s = check_seconds(timeout_s, "RemoteCache(timeout_s=...)")
        lease_s = check_seconds(lease_s, "RemoteCache(lease_s=...)")
        check_lease(lease_s, timeout_s, f"RemoteCache(lease_s={lease_s:g})", "timeout_s")
        self.address = shown_address(self.url)
        self.password = password
        if isinstance(signing_key, str):
            signing_key = signing_key.encode()
        self.signing_key: bytes | None = signing_key or None
        self.timeout_s = timeout_s
        self.lease_s = lease_s
        self._client: Any = None
        self.report = disk.OnceWarner()  # unusable entries: one warning per message
        self._faulted = False  # a fault was warned of: later ones are logged

    @classmethod
    def from_settings(cls, settings: Any, url: str | None = None) -> RemoteCache | None:
        """The remote cache at ``url``, else the one the settings name
        (``TILEAUTO_REMOTE_CACHE``), with the settings' password, key and limits; None when
        neither names one.

        Raises:
            SettingsError: ``TILEAUTO_REMOTE_CACHE_LEASE`` is too short to be renewed.
        """
        url = url or settings.remote_cache
        if not url:
            return None
        lease_s, timeout_s = settings.remote_cache_lease_s, settings.remote_cache_timeout_s
        check_lease(
            lease_s,
            timeout_s,
            f"TILEAUTO_REMOTE_CACHE_LEASE={lease_s:g}",
            "TILEAUTO_REMOTE_CACHE_TIMEOUT",
        )
        return cls(
            url,
            password=settings.remote_cache_password,
            signing_key=settings.remote_cache_key,
            timeout_s=settings.remote_cache_timeout_s,
            lease_s=settings.remote_cache_lease_s,
        )

    def __repr__(self) -> str:
        signed = ", signed" if self.signing_key else ""
        return f"RemoteCache({self.address!r}{signed})"

    # -- the connection -------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        """The Redis client (made on first use; it reconnects by itself after a fault).

        Raises:
            ImportError: the ``redis`` package is not installed (the message says how).
        """
        if self._client is None:
            try:
                import redis
            except ImportError as exc:
                raise ImportError(_INSTALL) from exc
            self._client = redis.Redis.from_url(
                self.url,
                password=self.password if not urllib.parse.urlsplit(self.url).password else None,
                socket_timeout=self.timeout_s,
                socket_connect_timeout=self.timeout_s,
                retry_on_timeout=False,
                health_check_interval=30,
            )
        return self._client

    def fault(self, exc: BaseException | str, doing: str) -> None:
        """A failed operation: the first is a warning naming the address (the tuning goes on
        with the local cache), later ones of this cache object are logged."""
        why = exc if isinstance(exc, str) else f"{type(exc).__name__}: {_first_line(exc)}"
        message = (
            f"remote cache {self.address}: {doing} failed ({why}); tuning goes on with the "
            "local cache"
        )
        if self._faulted:
            log.info("%s", message)
            return
        self._faulted = True
        disk.warn(message)

    def connection(self) -> dict[str, Any]:
        """What another process needs to connect as this one (the lease's renewing helper)."""
        has_own = bool(urllib.parse.urlsplit(self.url).password)
        return {
            "url": self.url,
            "password": None if has_own else self.password,
            "timeout_s": self.timeout_s,
        }

    def ping(self) -> None:
        """Raise the client's error when the server does not answer."""
        self.client.ping()

    # -- entries --------------------------------------------------------------------------------
    def name(self, kind: str, key: str) -> str:
        return f"{PREFIX}:{kind}:{key}"

    def get(self, key: str) -> RemoteEntry | None:
        """The checked entry of ``key``, or None: absent, unreachable (one warning), of
        another format or version (ignored), damaged or forged (one warning)."""
        try:
            fields = self.client.hgetall(self.name("entry", key))
        except Exception as exc:  # noqa: BLE001 - any client error is a miss
            self.fault(exc, f"reading {key}")
            return None
        if not fields:
            return None
        entry, problem = self.check(key, fields)
        if problem is not None:
            self.report(f"remote entry {key} at {self.address} is unusable: {problem}; ignored")
        if entry is not None and entry.note is not None:
            self.report(f"remote entry {key} at {self.address}: {entry.note}")
        return entry

    def check(self, key: str, fields: dict[bytes, bytes]) -> tuple[RemoteEntry | None, str | None]:
        """The entry in a hash's ``fields`` and why it is unusable (None: usable or ignored)."""
        raw = fields.get(b"record")
        if raw is None or fields.get(b"sha256", b"").decode(errors="replace") != (
            _signing.sha256_hex(raw)
        ):
            return None, "its record is missing or damaged (sha256 mismatch)"
        try:
            record = json.loads(raw)
            if not isinstance(record, dict):
                raise TypeError(f"a JSON {type(record).__name__}, not an object")
            # another version first: what its record holds is that version's to judge (a
            # newer tileauto's trials, say), and never a reason to delete it here
            other = another_version(record)
            if other is not None:
                log.info("remote entry %s: %s; ignored", key, other)
                return None, None
            files = record["files"]
            files["best_config.json"]["config"].items()
            float(files["latency.json"]["latency_ms"])
            [Trial.from_json(t) for t in files["trials.json"]["trials"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return None, f"its record is malformed ({type(exc).__name__}: {exc})"
        if record.get("key") != key:
            return None, f"it names another key ({record.get('key')!r})"
        signed, kernel, note = False, None, None
        if self.signing_key is not None and b"hmac" in fields:
            # the sha256 held, so the record is what some node published: a node of another
            # key (a rotation, a typo) uses it as a keyless node does, never re-tuning and
            # overwriting the fleet's entry; only the kernel needs the signature
            signed = _signing.verify(self.signing_key, fields[b"hmac"], raw)
            note = None if signed else _BAD_SIGNATURE
        if signed and b"kernel" in fields:
            assert self.signing_key is not None
            blob = fields[b"kernel"]
            if not _signing.verify(self.signing_key, fields.get(b"kernel_hmac"), raw, blob):
                return None, "its kernel's signature does not verify"
            kernel = _unpack_kernel(blob)
            if kernel is None:
                return None, "its signed kernel is malformed"
        size = sum(len(v) for v in fields.values())
        return RemoteEntry(key, record, kernel, size, signed, note), None

    def put(
        self,
        key: str,
        record: dict[str, Any],
        kernel_dir: Path | None = None,
        family: str | None = None,
    ) -> bool:
        """Publish an entry (and, with a signing key, its kernel); False when not published.

        ``record``: the meta (target, device, kernel name...) and ``files``, the entry's
        record files as JSON values. The channel of ``key`` is told, so waiters load it.
        """
        body = {**record, "format": FORMAT, "key": key, "versions": versions()}
        raw = json.dumps(body, sort_keys=True, default=repr).encode()
        fields: dict[str, bytes | str] = {"record": raw, "sha256": _signing.sha256_hex(raw)}
        if self.signing_key is not None:
            fields["hmac"] = _signing.sign(self.signing_key, raw)
            if kernel_dir is not None:
                blob = _pack_kernel(kernel_dir)
                fields["kernel"] = blob
                fields["kernel_hmac"] = _signing.sign(self.signing_key, raw, blob)
        try:
            pipe = self.client.pipeline(transaction=True)
            name = self.name("entry", key)
            pipe.delete(name)  # a kernel of an earlier publish never pairs with this record
            pipe.hset(name, mapping=fields)
            if family:
                pipe.sadd(self.name("family", family), key)
            pipe.publish(self.name("done", key), b"1")
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - a full or lost Redis: the local entry stays
            self.fault(exc, f"publishing {key}")
            return False
        return True

    def signed(self, key: str) -> bool:
        """Whether the stored entry of ``key`` is signed (it holds an HMAC; not checked here).

        Raises:
            redis.RedisError, OSError: the server did not answer.
        """
        return bool(self.client.hexists(self.name("entry", key), "hmac"))

    def exists(self, key: str) -> bool:
        """Whether an entry of ``key`` is stored (not checked).

        Raises:
            redis.RedisError, OSError: the server did not answer.
        """
        return bool(self.client.exists(self.name("entry", key)))

    def entry_keys(self) -> list[str]:
        """Every entry's key (SCAN: never blocks the server)."""
        prefix = self.name("entry", "")
        return sorted(
            k.decode()[len(prefix) :] for k in self.client.scan_iter(match=f"{prefix}*", count=1000)
        )

    def fields(self, key: str) -> dict[bytes, bytes]:
        """The raw hash of ``key``'s entry ({} when absent)."""
        return dict(self.client.hgetall(self.name("entry", key)))

    def delete(self, key: str) -> bool:
        """Remove ``key``'s entry and its place in its family's set (Redis drops the set with
        its last key); whether it was there. Its lease, if a process holds one, is left alone:
        that process is tuning the key again, and its waiters must go on waiting for it (a
        lease lapses by itself when its holder dies).

        Raises:
            redis.RedisError, OSError: the server did not answer.
        """
        family = _family_of_record(self.client.hget(self.name("entry", key), "record"))
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self.name("entry", key))
        if family is not None:
            pipe.srem(self.name("family", family), key)
        return bool(pipe.execute()[0])

    # -- the fleet's lease ----------------------------------------------------------------------
    def lease(self, key: str, limit_s: float | None = None) -> Lease:
        """This process's lease of ``key`` (not taken yet)."""
        return Lease(self.client, self.name("lease", key), self.lease_s, limit_s)

    def wait_for(
        self,
        key: str,
        lease: Lease,
        on_wait: Callable[[Holder], None] | None = None,
    ) -> bool:
        """Wait until this process holds ``key``'s lease (True) or its entry is published
        (False). The holder's death frees the lease when it expires; a holder past its time
        limit is taken over. ``on_wait(holder)`` is called for each new holder.

        A connection dropped once the wait has talked to the server (a proxy's idle timeout,
        a restarted Redis) does not end it: the waiter reconnects, subscribes again and looks
        again, as long as the server answers again within one lease expiry (a server away
        longer would have let the holder's lease expire too). Tuning without the lease while
        its holder tunes would tune the key twice.

        Raises:
            redis.RedisError, OSError: the server failed, or stayed away past the bound (the
                caller tunes locally).
        """
        told: list[bytes | None] = [None]
        retry = _Reconnect(self.lease_s)
        while True:
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self.name("done", key))  # before looking: no publish is missed
                return self._wait_subscribed(key, lease, pubsub, on_wait, told, retry)
            except Exception as exc:
                if not retry.again(exc):
                    raise
                log.info(
                    "remote cache %s: the wait for %s lost its connection (%s: %s); reconnecting",
                    self.address,
                    key,
                    type(exc).__name__,
                    _first_line(exc),
                )
            finally:
                with contextlib.suppress(Exception):  # a dead connection may not close cleanly
                    pubsub.close()
            retry.pause()

    def _wait_subscribed(
        self,
        key: str,
        lease: Lease,
        pubsub: Any,
        on_wait: Callable[[Holder], None] | None,
        told: list[bytes | None],
        retry: _Reconnect,
    ) -> bool:
        """:meth:`wait_for` on one subscribed connection (``told``: the holder last told)."""
        while True:
            if lease.acquire():
                return True
            retry.answered()
            if self.exists(key) and self.get(key) is not None:
                return False  # published (an unusable entry is replaced by this tuning)
            holder = lease.holder()
            if holder is None:
                continue  # it expired or was released since: take it
            if holder.overdue() and lease.take_over(holder):  # on Redis's clock
                log.info("took over %s from %s (past the bound of its tuning)", key, holder.owner)
                return True
            if on_wait is not None and holder.raw != told[0]:
                told[0] = holder.raw
                on_wait(holder)
            # woken by the publish; else look again within a fraction of the expiry
            pubsub.get_message(timeout=min(1.0, self.lease_s / 4))

    # -- the search's transfer ------------------------------------------------------------------
    def trials_elsewhere(
        self, family: str, target: str, device: dict[str, Any]
    ) -> list[ForeignTrials]:
        """The stored trials of the entries of one factory and problem (``family``) measured
        on another target or device than ``target`` and ``device``: what the search can
        transfer from other devices. Checked as :meth:`get` checks; [] when unreachable."""
        try:
            members = sorted(m.decode() for m in self.client.smembers(self.name("family", family)))
        except Exception as exc:  # noqa: BLE001 - no transfer, the tuning goes on
            self.fault(exc, "reading the trials of other devices")
            return []
        out = []
        for key in members:
            entry = self.get(key)
            if entry is None:
                continue
            record = entry.record
            if record.get("target") == target and record.get("device") == device:
                continue
            out.append(
                ForeignTrials(
                    key,
                    str(record.get("target")),
                    dict(record.get("device") or {}),
                    tuple(entry.trials()),
                )
            )
        return out


def family_of(factory: Any, args: tuple, kwargs: dict[str, Any], bucket: Any = None) -> str | None:
    """One factory's problem on every device: its source and its call (or ``key=`` bucket),
    without the target, device or versions. None when it cannot be keyed."""
    from tileauto.cache.args import passed_arguments
    from tileauto.cache.key import (
        UnkeyableError,
        describe_arguments,
        describe_key_value,
        family_digest,
        function_fingerprint,
    )

    try:
        call = passed_arguments(factory, args, kwargs)
        described = (
            describe_arguments(call)
            if bucket is None
            else {"bucket": describe_key_value(bucket, content=False)}
        )
        return family_digest(function_fingerprint(factory), described)
    except (UnkeyableError, TypeError, ValueError):
        return None


def record_of_entry(entry_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """The record of a disk entry folder: ``meta`` and its record files as JSON values.

    Raises:
        OSError, ValueError: a file is unreadable or not JSON.
    """
    files: dict[str, Any] = {}
    for name in RECORD_FILES:
        path = entry_dir / name
        if path.is_file():
            files[name] = json.loads(path.read_text())
    return {**meta, "files": files, "created": time.time()}


def _pack_kernel(kernel_dir: Path) -> bytes:
    files = {
        name: base64.b64encode((kernel_dir / name).read_bytes()).decode()
        for name in KERNEL_FILES
        if (kernel_dir / name).is_file()
    }
    return json.dumps(files, sort_keys=True).encode()


def _unpack_kernel(blob: bytes) -> dict[str, bytes] | None:
    """The files of a packed kernel: only the names a kernel folder has, the library required."""
    try:
        files = json.loads(blob)
        out = {name: base64.b64decode(text, validate=True) for name, text in files.items()}
    except (ValueError, TypeError, AttributeError):
        return None
    if set(out) - set(KERNEL_FILES) or KernelArtifact.LIB_NAME not in out:
        return None
    return out


def _family_of_record(raw: bytes | None) -> str | None:
    """The family a stored record names (None: none, or the record is unreadable)."""
    try:
        family = json.loads(raw)["family"] if raw is not None else None
    except (ValueError, KeyError, TypeError):
        return None
    return family if isinstance(family, str) and family else None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]


class _Reconnect:
    """When a waiter reconnects: after a dropped connection (never a refused password), once
    the server has answered this wait, until ``bound_s`` pass without an answer. The pauses
    double from :data:`RECONNECT_FIRST_S` to :data:`RECONNECT_MAX_S`."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self.reached = False  # the server answered this wait once: a fault now is a drop
        self.lost_since: float | None = None
        self.delay = RECONNECT_FIRST_S

    def answered(self) -> None:
        self.reached, self.lost_since, self.delay = True, None, RECONNECT_FIRST_S

    def again(self, exc: BaseException) -> bool:
        """Whether to reconnect after ``exc`` (False: raise it)."""
        import redis

        dropped = isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OSError))
        if not self.reached or not dropped or isinstance(exc, redis.AuthenticationError):
            return False
        now = time.monotonic()
        if self.lost_since is None:
            self.lost_since = now
        return now - self.lost_since < self.bound_s

    def pause(self) -> None:
        time.sleep(self.delay)  # a backoff, not a synchronization: the next try looks anew
        self.delay = min(self.delay * 2, RECONNECT_MAX_S)


def another_version(record: dict[str, Any]) -> str | None:
    """What differs when ``record`` is of another remote format or version than this node
    (``another TVM version (0.26.0; here 0.27.0)``), None when it is of this one."""
    if record.get("format") != FORMAT:
        return f"another remote format ({record.get('format')!r}; here {FORMAT})"
    theirs, ours = record.get("versions"), versions()
    if theirs == ours:
        return None
    if not isinstance(theirs, dict):
        return f"another version ({theirs!r})"
    names = {"format": "cache format", "tileauto": "tileauto", "tvm": "TVM"}
    differ = [
        f"{names.get(k, k)} {theirs.get(k)!s} (here {ours.get(k)!s})"
        for k in sorted(set(ours) | set(theirs))
        if theirs.get(k) != ours.get(k)
    ]
    return "another " + ", ".join(differ)


@dataclass(frozen=True)
class Checked:
    """One remote entry as the CLI's list and verify see it."""

    key: str
    entry: RemoteEntry | None  # None: unusable (``problem``) or of another version
    problem: str | None  # why it is unusable: damaged, forged, malformed
    other: str | None  # which version differs: valid for the nodes of that version
    created: float | None = None  # when it was published (None: its record does not say)


def iter_checked(cache: RemoteCache) -> Iterator[Checked]:
    """Every remote entry, checked (the CLI's list and verify).

    Raises:
        redis.RedisError, OSError: the server failed.
    """
    for key in cache.entry_keys():
        fields = cache.fields(key)
        if not fields:
            continue  # removed since the scan
        entry, problem = cache.check(key, fields)
        other = None
        if entry is None and problem is None:
            other = version_of_fields(fields) or "another format or version"
        yield Checked(key, entry, problem, other, created_of_fields(fields))


def created_of_fields(fields: dict[bytes, bytes]) -> float | None:
    """When an entry's raw hash says it was published (None: its record does not say)."""
    try:
        created = float(json.loads(fields[b"record"])["created"])
    except (ValueError, KeyError, TypeError, OverflowError):
        return None
    return created if math.isfinite(created) else None


def version_of_fields(fields: dict[bytes, bytes]) -> str | None:
    """:func:`another_version` of an entry's raw hash (None: unreadable, or this version)."""
    try:
        return another_version(json.loads(fields[b"record"]))
    except (ValueError, KeyError, TypeError):
        return None
