"""Tuned kernels as PyTorch operators: ``tileauto.torch_op("mylib::swiglu", swiglu, problem=...)``.

torch_op.py   torch_op() and TorchOp: the custom op, its real call and its memory of kernels
_fake.py      the op's outputs without running it: shapes and dtypes from the signature
_schema.py    the op's arguments, the tensors it writes, and its torch.library schema
"""

from tileauto.ops.torch_op import TorchOp, TorchOpError, torch_op

__all__ = ["TorchOp", "TorchOpError", "torch_op"]
