"""A worker killed for memory names its limit in MiB below 1 GiB (it read "0.0 GiB")."""

from __future__ import annotations

import jobs
import pytest

from tileauto.workers.procs import Worker, WorkerCrashed


def test_a_small_memory_limit_is_named_in_mib():
    worker = Worker("test-memory-message", memory_limit_bytes=2**20)
    try:
        with pytest.raises(WorkerCrashed) as info:  # held far longer than the memory poll
            worker.call(jobs.allocate_and_hold, 64 * 2**20, 600, timeout_s=600)
    finally:
        worker.close()
    assert info.value.out_of_memory is True
    assert "took more than 1.0 MiB and was killed" in str(info.value)
