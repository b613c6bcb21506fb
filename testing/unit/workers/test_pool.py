"""Tests of tileauto.workers.pool.WorkerPool: leases are exclusive, workers stay up between builds,
and workers forked from the caller are closed once nobody uses them."""

from __future__ import annotations

import jobs
import pytest

from tileauto.workers.pool import COMPILE_ENV, WorkerPool


@pytest.fixture
def pool():
    p = WorkerPool("test-pool")
    yield p
    p.close()


def test_the_shared_pool_is_one_per_process():
    assert WorkerPool.shared() is WorkerPool.shared()
    assert WorkerPool.shared().env == COMPILE_ENV  # one TVM and OpenMP thread per compile


def test_leases_never_share_a_worker(pool):
    first = pool.lease(2)
    second = pool.lease(1)
    assert len({*first, *second}) == 3
    assert [w.name for w in pool.workers] == ["test-pool-0", "test-pool-1", "test-pool-2"]
    for worker in first:
        pool.give_back(worker)
    assert set(pool.lease(2)) == set(first)  # given back: lent again, no new worker


def test_a_running_worker_is_lent_before_one_that_must_start(pool):
    cold, warm = pool.lease(2)
    warm.start()
    pool.give_back(cold)
    pool.give_back(warm)
    assert pool.lease(1) == [warm]


def test_grow_makes_workers_without_lending_them(pool):
    grown = pool.grow(2)
    assert grown == pool.workers and len(grown) == 2
    assert set(pool.lease(2)) == set(grown)


def test_pool_settings_reach_the_workers():
    pool = WorkerPool("test-pool-env", env={"TILEAUTO_TEST_POOL": "1"}, memory_limit_bytes=1 << 30)
    try:
        (worker,) = pool.lease(1)
        assert worker.memory_limit_bytes == 1 << 30
        assert worker.call(jobs.environment, "TILEAUTO_TEST_POOL", timeout_s=60) == "1"
    finally:
        pool.close()


def test_forked_workers_are_closed_when_nobody_holds_them(pool):
    idle, leased = pool.lease(2)
    for worker in (idle, leased):
        worker.start()
        worker.start_method = "fork"  # as if forked from the caller (the pool's rule only)
    pool.give_back(idle)
    pool.close_forked()
    assert not idle.alive  # idle: closed at once
    assert leased.alive  # its build still runs: closed when it is given back
    pool.give_back(leased)
    assert not leased.alive
