import tempfile
from pathlib import Path

import torch
from tvm import s_tir, te

import tileauto


@tileauto.jit(out_idx=[-1])
def add(n, block=64, dtype="float32"):
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    (i,) = sch.get_loops(sch.get_sblock("C"))
    _, inner = sch.split(i, [None, block])
    sch.vectorize(inner)
    return sch.mod["main"]


kernel = add(4096)  # elaborate + compile once for these arguments
assert add(n=4096, block=64) is kernel  # the same call (after binding defaults): no compile
print(kernel)  # JITKernel(main(A: [4096] float32, ...), out_idx=[2], config={...})
print(kernel.target)  # this CPU, with its real features
print(kernel.config)  # {'block': 64, 'dtype': 'float32'}

a, b = torch.randn(4096), torch.randn(4096)
c = kernel(a, b)  # inputs are A and B; C is allocated and returned
torch.testing.assert_close(c, a + b)

try:
    kernel(a, b[:1024])
except tileauto.KernelArgumentError as err:
    print(err)  # main: argument 1 (parameter 'B': wrong shape at dim 0: ...)

out = torch.empty(4096)
assert kernel(a, b, out) is out  # every parameter given: writes into `out`, no allocation

run = kernel.prepare(a, b)  # check once, allocate once
out = run()  # no per-call checks or allocation; the same `out` tensor every time
torch.testing.assert_close(out, a + b)

print(kernel.get_kernel_source()[:200])  # LLVM IR on a CPU target, CUDA C on a GPU one
print(kernel.get_script()[:200])  # the TVMScript of the compiled PrimFunc

with tempfile.TemporaryDirectory() as tmp:
    path = kernel.export_library(Path(tmp) / "add.so")  # writes add.so and add.so.json
    loaded = tileauto.JITKernel.load_library(path)  # no compiler needed
    torch.testing.assert_close(loaded(a, b), a + b)

# Compile several argument sets in parallel, in killable worker processes.
kernels = add.par_compile([{"n": 4096, "block": 16}, {"n": 4096, "block": 256}])
for k in kernels:
    if k:  # a CompileFailure is falsy and says which config failed and why
        torch.testing.assert_close(k(a, b), a + b)
    else:
        print(k)
assert add(4096, block=256) is kernels[1]  # par_compile's kernels serve the calls: no compile
