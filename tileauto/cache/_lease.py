"""A lease in Redis: one tuner per key across a fleet, taken over when its holder dies.

The lease is one Redis string, ``SET NX PX``: its value says who holds it (host and pid),
since when, the bound of the holder's tuning and a random token; it expires unless the holder
renews it, so a killed holder frees the key within one expiry. Taking, renewing, releasing and
taking over run one Lua script each (comparing the value first), so a process never ends a
lease it lost. Every time in a lease is Redis's clock (``TIME``), not a machine's: a node
whose clock is off neither takes over a live holder early nor leaves a hung one the key.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

# the value is stamped with Redis's clock: ARGV[1] is the JSON value without "since"
_STAMP = """
local t = redis.call('TIME')
local value = string.sub(ARGV[1], 1, -2) .. ', "since": ' .. t[1] .. '.' ..
  string.format('%06d', tonumber(t[2])) .. '}'
"""
_ACQUIRE = (
    _STAMP
    + """
if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  return value
end
return false
"""
)
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
_TAKE_OVER = (
    _STAMP
    + """
if redis.call('GET', KEYS[1]) == ARGV[3] then
  redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
  return value
end
return false
"""
)

# a holder is overdue 30 s past the bound it wrote (its tuning's max_seconds, the batch in
# flight, the re-timing: tileauto.tune.defaults.fleet_bound_s): the margin covers what
# comes before its clock starts (the workers' start, the lookups) and the publish
OVERDUE_MARGIN_S = 30.0


def owner_name() -> str:
    """This process as a lease names it: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: read from its value."""

    owner: str
    since: float  # Redis's clock when it was taken (seconds since the epoch)
    limit_s: float | None  # the bound of the holder's tuning: past it, another may take over
    raw: bytes  # the value as stored (what a take-over compares)
    read_at: float | None = None  # Redis's clock when the value was read

    @classmethod
    def parse(cls, raw: bytes, read_at: float | None = None) -> Holder:
        """The holder a lease value names (read at ``read_at``, Redis's clock); an unreadable
        value is an unnamed holder, since the read."""
        try:
            data = json.loads(raw)
            limit = data.get("limit_s")
            return cls(
                str(data["owner"]),
                float(data["since"]),
                float(limit) if limit is not None else None,
                raw,
                read_at,
            )
        except (ValueError, KeyError, TypeError):
            since = read_at if read_at is not None else time.time()
            return cls("an unknown process", since, None, raw, read_at)

    def overdue(self, now: float | None = None) -> bool:
        """Whether the holder has run past the bound of its tuning, with a margin. ``now``:
        Redis's clock (default: when the value was read, else this machine's)."""
        if self.limit_s is None:
            return False
        return self._now(now) - self.since > self.limit_s + OVERDUE_MARGIN_S

    def describe(self, now: float | None = None) -> str:
        """``host:pid since 12:03:04 UTC (35 s)``: the progress line's words."""
        stamp = time.strftime("%H:%M:%S UTC", time.gmtime(self.since))
        return f"{self.owner} since {stamp} ({max(0.0, self._now(now) - self.since):.0f} s)"

    def _now(self, now: float | None) -> float:
        if now is not None:
            return now
        return self.read_at if self.read_at is not None else time.time()


class Lease:
    """One key's lease, as one process sees it.

    Args:
        client: a ``redis.Redis`` client.
        name: the lease's Redis key.
        ttl_s: how long the lease lives unless renewed (renewed every third of it).
        limit_s: the bound of this process's tuning, written in the value (None: none: it
            is never taken over while it lives).
    """

    def __init__(self, client: Any, name: str, ttl_s: float, limit_s: float | None) -> None:
        self.client = client
        self.name = name
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.limit_s = limit_s
        self.value = b""  # as stored, once taken (Redis stamps the time in it)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._take_over = client.register_script(_TAKE_OVER)
        self._helper: Any = None  # the renewing process (keep_renewed)

    def _new_value(self) -> str:
        """The value naming this process, without its time: the script that stores it adds
        ``since`` from Redis's clock (a waiter says since when it tunes)."""
        data = {"owner": owner_name(), "limit_s": self.limit_s, "token": uuid.uuid4().hex}
        return json.dumps(data)

    def acquire(self) -> bool:
        """Take the lease if nobody holds it."""
        return self._stored(self._acquire(keys=[self.name], args=[self._new_value(), self.ttl_ms]))

    def holder(self) -> Holder | None:
        """Who holds it now (None: nobody), with Redis's clock at the read."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self.name)
        pipe.time()
        raw, (seconds, micros) = pipe.execute()
        return Holder.parse(raw, seconds + micros / 1e6) if raw is not None else None

    def take_over(self, holder: Holder) -> bool:
        """Take the lease from ``holder`` (past its bound), if it still holds it."""
        args = [self._new_value(), self.ttl_ms, holder.raw]
        return self._stored(self._take_over(keys=[self.name], args=args))

    def _stored(self, value: bytes | None) -> bool:
        """Whether a script stored this process's value (None: it did not)."""
        if value is None:
            return False
        self.value = value
        return True

    def renew(self) -> bool:
        """Extend the lease; False when this process no longer holds it."""
        return bool(self._renew(keys=[self.name], args=[self.value, self.ttl_ms]))

    def release(self) -> None:
        """Give the lease back, if this process still holds it."""
        self._release(keys=[self.name], args=[self.value])

    def keep_renewed(self, connection: dict[str, Any]) -> None:
        """Renew it every third of its expiry from a small helper process, until :meth:`stop`.

        A process, not a thread: a tuning forks its compile workers from this process only
        while it runs no other thread (else it starts them from a forkserver, seconds). The
        helper ends with this process: when its pipe closes without a stop (this process was
        killed), it releases the lease at once, so a waiter takes over without waiting for
        the expiry. It runs in a session of its own: a Ctrl-C at the terminal (SIGINT to the
        foreground process group) that the tuning survives, a program's graceful handler say,
        must not end the renewals while it tunes; the tuning's end still ends it.
        ``connection``: ``url``, ``password``, ``timeout_s`` of the Redis client.
        """
        self._helper = subprocess.Popen(
            [sys.executable, "-m", "tileauto.cache._lease"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        job = {**connection, "name": self.name, "value": self.value.decode(), "ttl_ms": self.ttl_ms}
        assert self._helper.stdin is not None
        self._helper.stdin.write(json.dumps(job) + "\n")
        self._helper.stdin.flush()

    def stop(self) -> list[str]:
        """Stop renewing (the lease itself is left to :meth:`release`); the renewals' faults,
        a helper that ended before it was told to stop among them."""
        helper, self._helper = self._helper, None
        if helper is None:
            return []
        ended = helper.poll()
        try:
            out, _ = helper.communicate("stop\n", timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            helper.kill()
            out, _ = helper.communicate()
        faults = [line for line in (out or "").splitlines() if line.strip()]
        if ended is not None:
            faults.append(
                f"the renewing helper process ended (exit {ended}) while the tuning ran: the "
                "lease was not renewed after that, and another process may have tuned the key too"
            )
        return faults


def _renew_until_stopped() -> None:
    """The helper process: renew every third of the expiry until told to stop; on a closed
    pipe (its parent died), release the lease. Prints the first fault of each kind."""
    import select

    import redis

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a SIGINT sent to it by pid: the pipe ends it
    job = json.loads(sys.stdin.readline())
    client = redis.Redis.from_url(
        job["url"],
        password=job.get("password"),
        socket_timeout=job["timeout_s"],
        socket_connect_timeout=job["timeout_s"],
    )
    renew, release = client.register_script(_RENEW), client.register_script(_RELEASE)
    name, value, ttl_ms = job["name"], job["value"], int(job["ttl_ms"])
    seen: set[str] = set()
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], ttl_ms / 3000)
        if ready:
            line = sys.stdin.readline()
            if not line:  # the parent died: free the key for a waiter now
                with contextlib.suppress(Exception):
                    release(keys=[name], args=[value])
            return
        try:
            renew(keys=[name], args=[value, ttl_ms])
        except Exception as exc:  # noqa: BLE001 - reported to the parent, renewing goes on
            kind = type(exc).__name__
            if kind not in seen:
                seen.add(kind)
                print(f"{kind}: {str(exc).strip()[:200]}", flush=True)


if __name__ == "__main__":
    _renew_until_stopped()
