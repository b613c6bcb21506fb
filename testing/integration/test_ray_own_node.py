"""A local Ray whose node dies under a tuning (issue 33): Ray ends its node when one of its
agents dies, and with it, silently, a driver that holds an object of that node's store. The
tuning warns that the node is lost and goes on with local workers, measuring again none of
the configs the Ray run measured; the next Ray tuning starts a new local Ray.

Each case runs in a child process that starts its own local Ray (``executor="ray"``, no
address); the agent killed is a child of that Ray's raylet, found from the Ray worker that
compiles or times the config ``vec=16``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

CHILD = """
import json, sys, warnings
sys.path.insert(0, {here!r})
import ray, tileauto, ray_helpers as h
from tileauto.jit.compiler import COMPILES

def tune():
    kernel = tileauto.jit(out_idx=[-1], target="llvm")(h.agent_killing_factory)(4096)
    return (
        tileauto.AutoTuner.from_kernel(kernel, [{{"vec": 4}}, {{"vec": 16}}, {{"vec": 8}}])
        .set_profile_args(warmup_iters=1, rep_iters=3, timeout=30.0,
                          timer=h.agent_killing_latency)
        .run(verbose=False)
    )

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = tune()
lost = [str(w.message) for w in caught if "Ray node" in str(w.message)]
first_gcs = ray.get_runtime_context().gcs_address
local_compiles = COMPILES.count  # compiles in this process: the local run's
second = tune()  # a cache hit: nothing tuned again
third_kernel = tileauto.jit(out_idx=[-1], target="llvm")(h.agent_killing_factory)(2048)
third = (
    tileauto.AutoTuner.from_kernel(third_kernel, [{{"vec": 4}}, {{"vec": 8}}])
    .set_profile_args(warmup_iters=1, rep_iters=3, timeout=30.0)
    .run(verbose=False)
)  # another problem on Ray: a new local Ray
print(json.dumps({{"lost": lost, "config": first.config, "cache_hit": second.cache_hit,
                  "trials": {{t.config["vec"]: t.status.value for t in first.trials}},
                  "local_compiles": local_compiles, "third": third.config is not None,
                  "new_ray": ray.get_runtime_context().gcs_address != first_gcs}}))
"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("phase", "agent"), [("compile", "DashboardAgent"), ("time", "RuntimeEnvAgent")]
)
def test_a_local_ray_whose_agent_dies_warns_and_the_tuning_goes_on_locally(tmp_path, phase, agent):
    here = str(Path(__file__).parent)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "TILEAUTO_RAY_ADDRESS")}
    env.update(
        TILEAUTO_EXECUTOR="ray",
        TILEAUTO_CACHE_DIR=str(tmp_path / "cache"),
        RAY_HELPERS_KILL_AGENT=f"{phase}:{agent}:{tmp_path / 'killed'}",
    )
    child = subprocess.run(
        [sys.executable, "-c", CHILD.format(here=here)],
        env=env, capture_output=True, text=True, timeout=500,
    )  # fmt: skip
    # before: the child exited with code 1 and no message (Ray ended it)
    assert child.returncode == 0, (child.returncode, child.stderr[-3000:])
    assert (tmp_path / "killed").read_text() == agent  # the agent was killed, once
    got = json.loads(child.stdout.strip().splitlines()[-1])
    assert len(got["lost"]) == 1, got
    assert got["lost"][0].startswith("the Ray node of this process died"), got
    assert "DashboardAgent, RuntimeEnvAgent" in got["lost"][0], got
    assert "raylet.err" in got["lost"][0] and "executor='local'" in got["lost"][0], got
    # the tuning finished: every config measured once, the winner the scripted fastest
    assert got["config"] == {"vec": 16}, got
    assert got["trials"] == {"4": "ok", "16": "ok", "8": "ok"}, got
    # the local run compiled only what Ray had not compiled and measured (at least vec=16)
    assert 1 <= got["local_compiles"] <= 3, got
    assert got["cache_hit"] and got["third"] and got["new_ray"], got
