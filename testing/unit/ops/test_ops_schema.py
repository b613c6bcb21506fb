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


@pytest.mark.parametrize(
    ("problem", "match"),
    [
        (lambda x, eps=float("inf"): x, r"'eps' defaults to inf: .*finite"),
        (lambda x, eps=float("nan"): x, r"'eps' defaults to nan: .*finite"),
        (lambda x, n=2**70: x, r"'n' defaults to 1180591620717411303424, outside the int64"),
        (lambda x, flag=True, eps=1e999: x, r"'eps' defaults to inf"),
    ],
    ids=["inf", "nan", "int_too_big", "overflowing_float"],
)
def test_a_default_the_schema_cannot_hold_is_named(problem, match):
    with pytest.raises(TorchOpError, match=match):
        op_params(problem)


def test_a_default_of_another_type_than_the_annotation_is_named():
    def problem(x, n: int = 2.5):
        return x

    with pytest.raises(TorchOpError, match=r"'n' \(SymInt.*defaults to 2.5 of type float.*an int"):
        op_params(problem)

    def flag(x, on: bool = 1):
        return x

    with pytest.raises(TorchOpError, match=r"'on' \(bool.*a bool"):
        op_params(flag)
    # what torch's schema holds is kept: an int default of a float argument, int64's extremes
    assert _schema_of(lambda x, eps=1e-6, n=2**63 - 1: x) == (
        "(Tensor x, float eps=1e-06, SymInt n=9223372036854775807) -> Tensor"
    )

    def widened(x, eps: float = 1):
        return x

    assert _schema_of(widened) == "(Tensor x, float eps=1) -> Tensor"
