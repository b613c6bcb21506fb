import tempfile
from pathlib import Path

import torch
from tvm import s_tir, te

from tileauto import AutoTuner, AutotuneResult


def kernel(block=64):
    A = te.placeholder((4096,), "float32", name="A")
    B = te.compute((4096,), lambda i: A[i] + 1, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    _, inner = sch.split(i, [None, block])
    sch.vectorize(inner)
    return sch.mod["main"]


result = (
    AutoTuner.from_kernel(kernel, [{"block": 16}, {"block": 256}])
    .set_compile_args(out_idx=[-1])
    .set_profile_args(warmup=2, rep=5)
    .run(verbose=False)
)
print(result.config, f"{result.latency:.4f} ms", f"speedup over default: {result.speedup:.2f}x")

with tempfile.TemporaryDirectory() as tmp:
    folder = result.save_to_disk(Path(tmp) / "tuned-add-one")  # JSON + kernel.so + manifest
    loaded = AutotuneResult.load_from_disk(folder)  # in another process or machine: no tuning
    assert loaded.config == result.config and loaded.cache_hit
    x = torch.randn(4096)
    torch.testing.assert_close(loaded.kernel(x), x + 1)
