"""A run killed in its clean-up (Ctrl-C pressed twice during a tuning) leaves its ``tune-*``
folder, or a ``.trash-*`` it was deleting: the next run of that kind removes them as it claims
its own folder, not only ``tileauto cache clear``."""

from __future__ import annotations

import uuid

from tileauto.cache import scratch


def ended(staging, kind):
    """A claimed folder of ``kind`` whose claim was let go, as a killed process's is."""
    folder = scratch.claim_scratch_dir(staging, kind)
    (folder.path / "build.o").write_bytes(b"\0" * 1024)
    folder.release()
    return folder.path


def test_a_new_tuning_removes_ended_tunings_folders_and_interrupted_deletes(tmp_path):
    staging = tmp_path / "staging"
    dead = ended(staging, "tune")
    other_kind = ended(staging, "work")  # left to its own kind's next claim
    trash = staging / f".trash-{uuid.uuid4().hex[:12]}"
    (trash / "kernel").mkdir(parents=True)
    (trash / "kernel" / "kernel.so").write_bytes(b"\0" * 1024)
    live = scratch.claim_scratch_dir(staging, "tune")  # a tuning running now, kept
    mine = user = None
    try:
        assert not dead.exists() and not trash.exists()
        assert live.path.is_dir() and other_kind.is_dir()
        user = staging / "tune-notes"  # a name tileauto does not make: never looked at
        user.mkdir()
        mine = scratch.claim_scratch_dir(staging, "tune")
        assert live.path.is_dir() and user.is_dir() and mine.path.is_dir()
    finally:
        live.remove()
        if mine is not None:
            mine.remove()
