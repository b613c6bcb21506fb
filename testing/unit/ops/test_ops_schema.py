"""The op's schema and arguments from ``problem``: tensors and the user's scalars only."""

from __future__ import annotations

import pytest
import torch

from tileauto.ops._fake import shapes_of
from tileauto.ops._schema import checked_mutates, op_params, schema_text
from tileauto.ops.torch_op import TorchOpError


def _schema_of(problem, mutates=(), outputs=1):
    params = op_params(problem)
    return schema_text(params, checked_mutates("ns::op", mutates, params), outputs)


def test_parameters_are_tensors_unless_annotated_or_defaulted():
    def problem(x, w: torch.Tensor, eps: float = 1e-6, n: int = 3, flag: bool = False):
        return x.shape

    assert _schema_of(problem) == (
        "(Tensor x, Tensor w, float eps=1e-06, SymInt n=3, bool flag=False) -> Tensor"
    )
    assert _schema_of(lambda a, scale=2.0: a.shape, outputs=2) == (
        "(Tensor a, float scale=2.0) -> (Tensor, Tensor)"
    )


def test_written_inputs_get_their_own_alias_set():
    assert _schema_of(lambda x, y, z: x.shape, mutates=["x", "z"], outputs=0) == (
        "(Tensor(a!) x, Tensor y, Tensor(b!) z) -> ()"
    )


@pytest.mark.parametrize(
    "problem, message",
    [
        (lambda *xs: xs, "'xs' is variadic positional"),
        (lambda x, *, k: x, "'k' is keyword-only"),
        (lambda x, s="a": x, "'s' defaults to 'a'"),
    ],
)
def test_parameters_an_op_cannot_have(problem, message):
    with pytest.raises(TorchOpError, match=message):
        op_params(problem)


def test_mutates_args_must_name_tensors_of_the_op():
    params = op_params(lambda x, eps=1.0: x)
    with pytest.raises(TorchOpError, match="'eps', which is not a tensor"):
        checked_mutates("ns::op", ["eps"], params)
    with pytest.raises(TypeError, match="list of argument names"):
        checked_mutates("ns::op", "x", params)


def test_out_shapes_answers_one_shape_or_one_per_output():
    assert shapes_of("ns::op", (2, 3), 1) == [(2, 3)]
    assert shapes_of("ns::op", torch.Size([2, 3]), 1) == [(2, 3)]
    assert shapes_of("ns::op", [(2,), (3, 4)], 2) == [(2,), (3, 4)]
    with pytest.raises(TorchOpError, match="returned 1 shape"):
        shapes_of("ns::op", [(2,)], 2)
