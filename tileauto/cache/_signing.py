"""HMAC-SHA256 signatures of remote entries: a fleet shares binaries only under the operator's key.

A remote entry's record and its kernel are signed with ``TILEAUTO_REMOTE_CACHE_KEY``; a
process loads a shared kernel only when the signature verifies under its own key, so a
writer of the Redis database without the key cannot make a fleet run its code.
"""

from __future__ import annotations

import hashlib
import hmac


def sign(key: bytes, *parts: bytes) -> str:
    """The hex HMAC-SHA256 of ``parts`` (each length-prefixed: no two splits sign alike)."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "big"))
        mac.update(part)
    return mac.hexdigest()


def verify(key: bytes, signature: bytes | str | None, *parts: bytes) -> bool:
    """Whether ``signature`` is :func:`sign` of ``parts`` under ``key`` (constant time)."""
    if signature is None:
        return False
    if isinstance(signature, bytes):
        try:
            signature = signature.decode("ascii")
        except UnicodeDecodeError:
            return False
    return hmac.compare_digest(sign(key, *parts), signature)


def sha256_hex(data: bytes) -> str:
    """The hex sha256 of ``data`` (an unsigned record's check against damage, not forgery)."""
    return hashlib.sha256(data).hexdigest()
