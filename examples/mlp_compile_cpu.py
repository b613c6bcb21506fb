"""An MLP block made of tuned kernels, compiled whole by ``torch.compile(fullgraph=True)``.

    x -> RMSNorm -> (gate, up) projections -> SwiGLU -> down projection -> + x

RMSNorm is ``examples/rmsnorm_cpu.py`` and SwiGLU ``examples/elementwise_cpu.py``, each tuned
by ``@tileauto.autotune`` and registered as a PyTorch op with one line of
``tileauto.torch_op``; the projections are ``torch.nn.Linear``. The block is compiled with
Inductor (no graph break: the tileauto ops are nodes of the graph), run for two token counts
(each tuned at its first call) and checked against the same block in eager torch
(``torch.nn.functional.rms_norm`` and ``silu``). Run ``python examples/mlp_compile_cpu.py``.
"""

from __future__ import annotations

import argparse
import sys

import _common
import elementwise_cpu
import rmsnorm_cpu
import torch
import torch.nn.functional as F

import tileauto


def make_ops(configs: int) -> tuple[tileauto.ops.TorchOp, tileauto.ops.TorchOp]:
    """The two ops, each tuning its first ``configs`` configs of the example's space."""
    swiglu = tileauto.autotune(
        configs=lambda M, N: elementwise_cpu.configs(M, N)[:configs],
        warmup=5,
        rep=20,
        verbose=False,
    )(elementwise_cpu.swiglu)
    rmsnorm = tileauto.autotune(
        configs=lambda M, N: rmsnorm_cpu.configs(M, N)[:configs], warmup=5, rep=20, verbose=False
    )(rmsnorm_cpu.rmsnorm_kernel)
    return (
        tileauto.torch_op("examples::swiglu", swiglu, problem=lambda gate, up: gate.shape),
        tileauto.torch_op("examples::rmsnorm", rmsnorm, problem=lambda x, weight: x.shape),
    )


class MLPBlock(torch.nn.Module):
    """A transformer's MLP: pre-norm, SwiGLU, residual. ``tuned=False`` runs eager torch."""

    def __init__(self, dim: int, hidden: int, ops: tuple | None = None) -> None:
        super().__init__()
        self.norm = torch.nn.Parameter(torch.rand(dim) + 0.5)
        self.gate = torch.nn.Linear(dim, hidden, bias=False)
        self.up = torch.nn.Linear(dim, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, dim, bias=False)
        self.ops = ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ops is None:
            h = F.rms_norm(x, (x.shape[-1],), self.norm, 1e-6)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))
        swiglu, rmsnorm = self.ops
        h = rmsnorm(x, self.norm)
        return x + self.down(swiglu(self.gate(h), self.up(h)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--tokens", type=int, nargs="+", default=[64, 96])
    parser.add_argument("--configs", type=int, default=4, help="configs to tune per kernel")
    args = parser.parse_args(argv)
    if min(args.dim, args.hidden, args.configs, *args.tokens) < 1:
        parser.error("--dim, --hidden, --tokens and --configs must be positive")
    torch.manual_seed(0)
    block = MLPBlock(args.dim, args.hidden, make_ops(args.configs)).eval()
    eager = MLPBlock(args.dim, args.hidden).eval()
    eager.load_state_dict(block.state_dict())
    explained = torch._dynamo.explain(block)(torch.randn(args.tokens[0], args.dim))
    print(f"graph breaks: {explained.graph_break_count}")
    compiled = torch.compile(block, fullgraph=True)
    worst = 0.0
    with torch.no_grad():
        for tokens in args.tokens:
            x = torch.randn(tokens, args.dim)
            got, want = compiled(x), eager(x)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            worst = max(worst, float((got - want).abs().max()))
            print(f"{tokens} tokens: compiled block matches eager torch (max |diff| {worst:.2e})")
    return 0 if explained.graph_break_count == 0 else 1


if __name__ == "__main__":
    _common.use_all_cores()
    sys.exit(main())
