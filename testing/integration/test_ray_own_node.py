"""A local Ray whose node dies under a tuning (issue 33): Ray ends its node when one of its
agents dies, and with it, silently, a driver that holds an object of that node's store. The
tuning raises a TileautoError that says so, and the next tuning starts a new local Ray.

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
import json, sys
sys.path.insert(0, {here!r})
import ray, tileauto, ray_helpers as h
from tileauto.errors import TileautoError

def tune():
    kernel = tileauto.jit(out_idx=[-1], target="llvm")(h.agent_killing_factory)(4096)
    return (
        tileauto.AutoTuner.from_kernel(kernel, [{{"vec": 4}}, {{"vec": 16}}, {{"vec": 8}}])
        .set_profile_args(warmup_iters=1, rep_iters=3, timeout=30.0,
                          timer=h.agent_killing_latency)
        .run(verbose=False)
    )

try:
    tune()
    error = None
except TileautoError as exc:
    error = f"{{type(exc).__name__}}: {{exc}}"
first_gcs = ray.get_runtime_context().gcs_address
result = tune()  # the tuning after it: on a new local Ray
print(json.dumps({{"error": error, "config": result.config,
                  "new_ray": ray.get_runtime_context().gcs_address != first_gcs}}))
"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("phase", "agent"), [("compile", "DashboardAgent"), ("time", "RuntimeEnvAgent")]
)
def test_a_local_ray_whose_agent_dies_is_an_error_that_says_so_and_ray_starts_again(
    tmp_path, phase, agent
):
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
    assert got["error"].startswith("RayNodeLostError: the Ray node of this process died"), got
    assert "DashboardAgent, RuntimeEnvAgent" in got["error"] and "raylet.err" in got["error"]
    assert got["config"] == {"vec": 16} and got["new_ray"]
