"""Tests of tileauto.run.inputs: seeded generators, supply_prog, captured tensors, set_autotune_inputs."""

from __future__ import annotations

import pytest
import torch

import tileauto
from tileauto.artifact import ParamSpec
from tileauto.errors import InputSupplyError
from tileauto.run.inputs import (
    TensorSupplyType,
    captured_inputs,
    generate,
    make_inputs,
    set_autotune_inputs,
)

A = ParamSpec("A", (8, 16), "float32")
B = ParamSpec("B", (16,), "float32")
C = ParamSpec("C", (8, 16), "float32")
PARAMS = (A, B, C)
IN_POS = (0, 1)

RANDOM_TYPES = [
    TensorSupplyType.Auto,
    TensorSupplyType.Integer,
    TensorSupplyType.Uniform,
    TensorSupplyType.Normal,
    TensorSupplyType.Randn,
]


def gen(supply, seed=0, params=PARAMS, in_pos=IN_POS):
    return make_inputs(
        params, in_pos, captured=None, supply_prog=None, supply_type=supply, seed=seed, device="cpu"
    )


@pytest.mark.parametrize("supply", list(TensorSupplyType), ids=lambda s: s.name)
def test_generated_inputs_have_the_parameter_layout(supply):
    a, b = gen(supply)
    assert a.shape == (8, 16) and b.shape == (16,)
    assert a.dtype == b.dtype == torch.float32
    assert a.device.type == "cpu" and a.is_contiguous()


@pytest.mark.parametrize("supply", RANDOM_TYPES, ids=lambda s: s.name)
def test_same_seed_same_data(supply):
    first, second = gen(supply, seed=7), gen(supply, seed=7)
    for x, y in zip(first, second):
        assert torch.equal(x, y)


@pytest.mark.parametrize("supply", RANDOM_TYPES, ids=lambda s: s.name)
def test_different_seed_different_data(supply):
    first, second = gen(supply, seed=1), gen(supply, seed=2)
    assert not torch.equal(first[0], second[0])


def test_inputs_of_one_call_differ_from_each_other():
    a, b = gen(TensorSupplyType.Randn, params=(A, A), in_pos=(0, 1))
    assert not torch.equal(a, b)


def test_zero_and_one():
    for t in gen(TensorSupplyType.Zero):
        assert torch.count_nonzero(t) == 0
    for t in gen(TensorSupplyType.One):
        assert torch.all(t == 1)


def test_default_supply_is_auto():
    assert all(torch.equal(x, y) for x, y in zip(gen(None), gen(TensorSupplyType.Auto)))


def test_value_ranges_of_float_generators():
    (u,) = gen(TensorSupplyType.Uniform, params=(ParamSpec("x", (4096,), "float32"),), in_pos=(0,))
    assert float(u.min()) >= -1.0 and float(u.max()) < 1.0
    (r,) = gen(TensorSupplyType.Randn, params=(ParamSpec("x", (4096,), "float32"),), in_pos=(0,))
    assert abs(float(r.mean())) < 0.1 and 0.9 < float(r.std()) < 1.1
    (i,) = gen(TensorSupplyType.Integer, params=(ParamSpec("x", (4096,), "float32"),), in_pos=(0,))
    assert i.dtype == torch.float32 and torch.equal(i, i.round())
    assert set(i.unique().tolist()) <= {-2.0, -1.0, 0.0, 1.0, 2.0}


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("supply", [TensorSupplyType.Auto, TensorSupplyType.Integer])
def test_integer_dtypes_get_small_integers(dtype, supply):
    spec = ParamSpec("x", (1024,), dtype)
    (t,) = gen(supply, params=(spec,), in_pos=(0,))
    assert t.dtype == getattr(torch, dtype)
    assert set(t.unique().tolist()) == {-2, -1, 0, 1, 2}


def test_uint8_gets_non_negative_integers():
    (t,) = gen(TensorSupplyType.Integer, params=(ParamSpec("x", (1024,), "uint8"),), in_pos=(0,))
    assert t.dtype == torch.uint8
    assert set(t.unique().tolist()) == {0, 1, 2, 3}


@pytest.mark.parametrize("supply", RANDOM_TYPES, ids=lambda s: s.name)
def test_bool_dtype(supply):
    (t,) = gen(supply, params=(ParamSpec("m", (1024,), "bool"),), in_pos=(0,))
    assert t.dtype == torch.bool
    assert 0 < int(t.sum()) < 1024


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_other_float_dtypes(dtype):
    (t,) = gen(TensorSupplyType.Auto, params=(ParamSpec("x", (64,), dtype),), in_pos=(0,))
    assert t.dtype == getattr(torch, dtype)
    assert torch.isfinite(t).all() and t.abs().sum() > 0


def test_uniform_on_integer_dtype_is_not_all_zeros():
    (t,) = gen(TensorSupplyType.Uniform, params=(ParamSpec("x", (1024,), "int32"),), in_pos=(0,))
    assert torch.count_nonzero(t) > 0


def test_unknown_dtype_is_an_error():
    with pytest.raises(tileauto.TileautoError, match="float4_e2m1"):
        gen(TensorSupplyType.Auto, params=(ParamSpec("x", (4,), "float4_e2m1"),), in_pos=(0,))


def test_bad_supply_type():
    with pytest.raises(InputSupplyError, match="TensorSupplyType"):
        gen("randn")


def test_symbolic_shape_without_inputs_says_how_to_supply_them():
    spec = ParamSpec("A", ("n", 4), "float32")
    with pytest.raises(InputSupplyError) as info:
        gen(TensorSupplyType.Auto, params=(spec,), in_pos=(0,))
    msg = str(info.value)
    assert "'A'" in msg and "symbolic" in msg
    assert "set_autotune_inputs" in msg and "supply_prog" in msg


def test_generate_directly():
    t = generate(B, TensorSupplyType.One, torch.Generator().manual_seed(0), "cpu")
    assert torch.equal(t, torch.ones(16))


# -- captured tensors and supply_prog --------------------------------------------------------------


def test_captured_inputs_have_priority():
    a, b = torch.randn(8, 16), torch.randn(16)
    got = make_inputs(
        PARAMS,
        IN_POS,
        captured=[a, b],
        supply_prog=lambda params: pytest.fail("supply_prog must not run"),
        supply_type=TensorSupplyType.Zero,
        seed=0,
        device="cpu",
    )
    assert got[0] is a and got[1] is b


def test_captured_may_include_outputs():
    a, b, c = torch.randn(8, 16), torch.randn(16), torch.empty(8, 16)
    got = make_inputs(
        PARAMS, IN_POS, captured=[a, b, c], supply_prog=None, supply_type=None, seed=0, device="cpu"
    )
    assert len(got) == 2 and got[0] is a and got[1] is b


def test_captured_wrong_count_names_the_inputs():
    with pytest.raises(InputSupplyError) as info:
        make_inputs(
            PARAMS,
            IN_POS,
            captured=[torch.zeros(1)],
            supply_prog=None,
            supply_type=None,
            seed=0,
            device="cpu",
        )
    msg = str(info.value)
    assert "set_autotune_inputs gave 1 tensors" in msg and "['A', 'B']" in msg


def test_captured_non_tensor():
    with pytest.raises(InputSupplyError, match=r"input 1 \(B\) is int"):
        make_inputs(
            PARAMS,
            IN_POS,
            captured=[torch.zeros(8, 16), 3],
            supply_prog=None,
            supply_type=None,
            seed=0,
            device="cpu",
        )


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            [torch.zeros(8, 16, dtype=torch.float64), torch.zeros(16)],
            r"input 0 \(A\) is torch.float64, the kernel takes torch.float32",
        ),
        (
            [torch.zeros(8, 16), torch.zeros(17)],
            r"input 1 \(B\) has shape \(17,\), the kernel takes \(16,\)",
        ),
        ([torch.zeros(8, 16), torch.zeros(16, 1)], r"input 1 \(B\) has shape \(16, 1\)"),
    ],
)
def test_supplied_tensors_of_another_dtype_or_shape_are_refused_naming_both(given, message):
    # was: every config failed alike, with the first line of TVM's message each
    # ("Mismatched A.dtype on argument #0 when calling:")
    for source, captured, prog in (
        ("set_autotune_inputs", given, None),
        ("supply_prog", None, lambda params: given),
    ):
        with pytest.raises(InputSupplyError, match=f"{source}: {message}"):
            make_inputs(
                PARAMS,
                IN_POS,
                captured=captured,
                supply_prog=prog,
                supply_type=None,
                seed=0,
                device="cpu",
            )
    symbolic = (ParamSpec("X", ("n", 4), "float32"),)
    (x,) = make_inputs(
        symbolic,
        (0,),
        captured=[torch.zeros(7, 4)],
        supply_prog=None,
        supply_type=None,
        seed=0,
        device="cpu",
    )
    assert x.shape == (7, 4)  # a size variable takes any size


def test_supply_prog_receives_the_params_and_may_return_one_tensor():
    seen = []

    def supply(params):
        seen.append(params)
        return torch.full((8,), 3.0)

    got = make_inputs(
        (ParamSpec("x", (8,), "float32"), ParamSpec("y", (8,), "float32")),
        (0,),
        captured=None,
        supply_prog=supply,
        supply_type=None,
        seed=0,
        device="cpu",
    )
    assert seen and [p.name for p in seen[0]] == ["x"]  # only the inputs, as in TileLang
    assert len(got) == 1 and torch.equal(got[0], torch.full((8,), 3.0))


def test_supply_prog_records_are_tilelang_shaped():
    """`torch.ones(p.shape, dtype=p.dtype)` (or randn for floats) works on the records."""
    seen = []

    def supply(params):
        seen.extend(params)
        return [torch.ones(p.shape, dtype=p.dtype) for p in params]

    got = make_inputs(
        (ParamSpec("a", (4, 2), "float16"), ParamSpec("i", (3,), "int32"), C),
        (0, 1),
        captured=None,
        supply_prog=supply,
        supply_type=None,
        seed=0,
        device="cpu",
    )
    assert [p.dtype for p in seen] == [torch.float16, torch.int32]
    assert [p.shape for p in seen] == [(4, 2), (3,)] and all(
        isinstance(d, int) for p in seen for d in p.shape
    )
    assert isinstance(seen[0], tileauto.KernelParam) and not seen[0].is_output
    assert got[0].dtype == torch.float16 and got[1].shape == (3,)


def test_supply_prog_asking_for_outputs_gets_every_parameter():
    seen = []

    def supply(params, with_output=False):
        seen.append((with_output, [(p.name, p.is_output) for p in params]))
        return [torch.ones(8, 16), torch.ones(16), torch.zeros(8, 16)]

    got = make_inputs(
        PARAMS, IN_POS, captured=None, supply_prog=supply, supply_type=None, seed=0, device="cpu"
    )
    assert seen == [(True, [("A", False), ("B", False), ("C", True)])]
    assert len(got) == 2  # the outputs it made are dropped


def test_supply_prog_for_symbolic_shapes():
    spec = ParamSpec("A", ("n", 4), "float32")
    got = make_inputs(
        (spec, spec),
        (0,),
        captured=None,
        supply_prog=lambda params: [torch.ones(5, 4)],
        supply_type=None,
        seed=0,
        device="cpu",
    )
    assert got[0].shape == (5, 4)


def test_supply_prog_tells_size_variables_named_alike_apart():
    """Two distinct variables both called n have distinct keys in ``shape`` (as TileLang's
    records hold the variables themselves); ``size_names`` gives their names for display."""
    specs = (
        ParamSpec("A", ("n", 4), "float32"),
        ParamSpec("B", ("n_1 * 2",), "float32", renamed=(("n_1", "n"),)),
    )
    seen = []

    def supply(params):
        seen.extend(params)
        sizes = {"n": 5, "n_1 * 2": 6}  # by key: the second n is n_1
        return [torch.ones([sizes.get(d, d) for d in p.shape]) for p in params]

    got = make_inputs(
        specs, (0, 1), captured=None, supply_prog=supply, supply_type=None, seed=0, device="cpu"
    )
    assert [tuple(t.shape) for t in got] == [(5, 4), (6,)]
    assert [r.shape for r in seen] == [("n", 4), ("n_1 * 2",)]
    assert [r.size_names for r in seen] == [{"n": "n"}, {"n_1": "n"}]


def test_a_symbolic_shape_error_names_the_variable_by_its_name():
    spec = ParamSpec("B", ("n_1", 4), "float32", renamed=(("n_1", "n"),))
    with pytest.raises(InputSupplyError, match=r"'B' has symbolic shape \['n', 4\]"):
        generate(spec, TensorSupplyType.Auto, torch.Generator(), "cpu")


def test_supply_prog_returning_garbage():
    with pytest.raises(InputSupplyError, match="supply_prog must return a list of tensors"):
        make_inputs(
            PARAMS,
            IN_POS,
            captured=None,
            supply_prog=lambda p: 3,
            supply_type=None,
            seed=0,
            device="cpu",
        )


# -- set_autotune_inputs ---------------------------------------------------------------------------


def test_set_autotune_inputs_context():
    a, b = torch.zeros(2), torch.ones(2)
    assert captured_inputs() is None
    with tileauto.set_autotune_inputs(a, b):
        got = captured_inputs()
        assert got is not None and len(got) == 2 and got[0] is a and got[1] is b
    assert captured_inputs() is None


def test_set_autotune_inputs_accepts_a_list_or_tuple():
    a, b = torch.zeros(2), torch.ones(2)
    with set_autotune_inputs([a, b]):
        assert captured_inputs() == (a, b)
    with set_autotune_inputs((a, b)):
        assert captured_inputs() == (a, b)


def test_set_autotune_inputs_nesting():
    a, b, c = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    with set_autotune_inputs(a):
        with set_autotune_inputs(b, c):
            assert captured_inputs() == (b, c)
        assert captured_inputs() == (a,)
    assert captured_inputs() is None


def test_set_autotune_inputs_reset_after_an_exception():
    with pytest.raises(KeyError), set_autotune_inputs(torch.zeros(1)):
        raise KeyError("boom")
    assert captured_inputs() is None


def test_set_autotune_inputs_rejects_non_tensors():
    with (
        pytest.raises(
            InputSupplyError, match=r"argument 1 must be a torch.Tensor \(or an int or float"
        ),
        set_autotune_inputs(torch.zeros(1), [1, 2]),
    ):
        pass
    assert captured_inputs() is None


def test_set_autotune_inputs_takes_numbers_for_scalar_parameters():
    with set_autotune_inputs(torch.zeros(1), 2.5, 3):
        assert captured_inputs()[1:] == (2.5, 3)


# -- scalars and size variables that no config could run with -------------------------------------
SIZED = (
    ParamSpec("A", ("n",), "float32"),
    ParamSpec("s", (), "int32", scalar=True),
    ParamSpec("B", ("n",), "float32"),
)


def _given(values, params=SIZED, in_pos=(0, 1, 2)):
    return make_inputs(
        params, in_pos, captured=values, supply_prog=None, supply_type=None, seed=0, device="cpu"
    )


@pytest.mark.parametrize(
    "value", [2**31, -(2**31) - 1, 2**32 + 7, 2.7, float("nan"), torch.tensor(2.7)], ids=repr
)
def test_an_integer_scalar_that_its_dtype_cannot_hold_is_refused_naming_it(value):
    # TVM would wrap 2**32 + 7 to 7 (or truncate 2.7) silently, for every config alike
    with pytest.raises(
        InputSupplyError, match=r"input 1 \(s\) is the int32 scalar s: give a whole"
    ):
        _given([torch.zeros(4), value, torch.zeros(4)])


@pytest.mark.parametrize("value", [2**31 - 1, -(2**31), 3.0, torch.tensor(5)], ids=repr)
def test_an_integer_scalar_in_range_is_taken(value):
    assert _given([torch.zeros(4), value, torch.zeros(4)])[1] == value


@pytest.mark.parametrize("value", [True, torch.tensor(False)], ids=repr)
def test_a_bool_for_an_integer_scalar_is_refused_naming_it(value):
    # the kernel refuses it (it ran as 1 or 0): every config would fail the same way
    with pytest.raises(
        InputSupplyError, match=r"input 1 \(s\) is the int32 scalar s: give an int, got the bool"
    ):
        _given([torch.zeros(4), value, torch.zeros(4)])


def test_a_float_scalar_takes_any_float():
    params = (ParamSpec("A", (4,), "float32"), ParamSpec("alpha", (), "float32", scalar=True))
    got = _given([torch.zeros(4), float("nan")], params, (0, 1))
    assert got[1] != got[1]  # NaN


def test_tensors_that_give_one_size_variable_two_values_are_refused_naming_both():
    with pytest.raises(
        InputSupplyError, match=r"the size n is 16 in input 0 \(A\) .* 8 in input 2"
    ):
        _given([torch.zeros(16), 1, torch.zeros(8)])


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
def test_generated_unsigned_integers_are_small_and_not_wrapped(dtype):
    (t,) = gen(TensorSupplyType.Auto, params=(ParamSpec("A", (256,), dtype),), in_pos=(0,))
    assert int(t.to(torch.int64).min()) >= 0 and int(t.to(torch.int64).max()) <= 3
