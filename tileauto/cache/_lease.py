"""A lease in Redis: one tuner per key across a fleet, taken over when its holder dies.

The lease is one Redis string, ``SET NX PX``: its value says who holds it (host and pid),
since when, the holder's time limit and a random token; it expires unless the holder renews
it, so a killed holder frees the key within one expiry. Renewing, releasing and taking over
compare the value first, in one Lua script each, so a process never ends a lease it lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

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
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""


# a holder is overdue past its limit x 1.25 + 30 s: a tuning stops asking for configs at its
# limit, but the batch in flight and the re-timing of the best still run
OVERDUE_FACTOR = 1.25
OVERDUE_MARGIN_S = 30.0


def owner_name() -> str:
    """This process as a lease names it: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: read from its value."""

    owner: str
    since: float  # time.time() when it was taken
    limit_s: float | None  # the holder's tuning time limit: past it, another may take over
    raw: bytes  # the value as stored (what a take-over compares)

    @classmethod
    def parse(cls, raw: bytes) -> Holder:
        """The holder a lease value names; an unreadable value is an unnamed holder."""
        try:
            data = json.loads(raw)
            limit = data.get("limit_s")
            return cls(
                str(data["owner"]),
                float(data["since"]),
                float(limit) if limit is not None else None,
                raw,
            )
        except (ValueError, KeyError, TypeError):
            return cls("an unknown process", time.time(), None, raw)

    def overdue(self, now: float) -> bool:
        """Whether the holder has run past its own tuning time limit, with a margin (the
        batch in flight at the limit finishes, then the best are re-timed)."""
        if self.limit_s is None:
            return False
        return now - self.since > self.limit_s * OVERDUE_FACTOR + OVERDUE_MARGIN_S

    def describe(self, now: float) -> str:
        """``host:pid since 12:03:04 UTC (35 s)``: the progress line's words."""
        stamp = time.strftime("%H:%M:%S UTC", time.gmtime(self.since))
        return f"{self.owner} since {stamp} ({max(0.0, now - self.since):.0f} s)"


class Lease:
    """One key's lease, as one process sees it.

    Args:
        client: a ``redis.Redis`` client.
        name: the lease's Redis key.
        ttl_s: how long the lease lives unless renewed (renewed every third of it).
        limit_s: this process's tuning time limit, written in the value (None: none).
    """

    def __init__(self, client: Any, name: str, ttl_s: float, limit_s: float | None) -> None:
        self.client = client
        self.name = name
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.limit_s = limit_s
        self.value = self._new_value()
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._take_over = client.register_script(_TAKE_OVER)
        self._helper: Any = None  # the renewing process (keep_renewed)

    def _new_value(self) -> bytes:
        """The value naming this process, stamped now (a waiter says since when it tunes)."""
        data = {
            "owner": owner_name(),
            "since": time.time(),
            "limit_s": self.limit_s,
            "token": uuid.uuid4().hex,
        }
        return json.dumps(data).encode()

    def acquire(self) -> bool:
        """Take the lease if nobody holds it."""
        self.value = self._new_value()
        return bool(self.client.set(self.name, self.value, nx=True, px=self.ttl_ms))

    def holder(self) -> Holder | None:
        """Who holds it now (None: nobody)."""
        raw = self.client.get(self.name)
        return Holder.parse(raw) if raw is not None else None

    def take_over(self, holder: Holder) -> bool:
        """Take the lease from ``holder`` (past its limit), if it still holds it."""
        self.value = self._new_value()
        return bool(self._take_over(keys=[self.name], args=[holder.raw, self.value, self.ttl_ms]))

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
        the expiry. ``connection``: ``url``, ``password``, ``timeout_s`` of the Redis client.
        """
        self._helper = subprocess.Popen(
            [sys.executable, "-m", "tileauto.cache._lease"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        job = {**connection, "name": self.name, "value": self.value.decode(), "ttl_ms": self.ttl_ms}
        assert self._helper.stdin is not None
        self._helper.stdin.write(json.dumps(job) + "\n")
        self._helper.stdin.flush()

    def stop(self) -> list[str]:
        """Stop renewing (the lease itself is left to :meth:`release`); the renewals' faults."""
        helper, self._helper = self._helper, None
        if helper is None:
            return []
        try:
            out, _ = helper.communicate("stop\n", timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            helper.kill()
            out, _ = helper.communicate()
        return [line for line in (out or "").splitlines() if line.strip()]


def _renew_until_stopped() -> None:
    """The helper process: renew every third of the expiry until told to stop; on a closed
    pipe (its parent died), release the lease. Prints the first fault of each kind."""
    import select

    import redis

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
