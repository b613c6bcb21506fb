"""The encoder: a parameter's values as model columns."""

from __future__ import annotations

import numpy as np

from tileauto.search._features import Encoder
from tileauto.space import Param, product


def test_numbers_give_their_value_and_a_power_of_two_flag_when_it_tells_them_apart():
    space = product(block=[16, 48, 64], vec=[1, 2, 4], layout=["row", "col", "tiled"], k=[7])
    enc = Encoder(space)
    rows = enc.rows(space.codes([0, len(space) - 1]))
    # block: value + pow2 flag; vec: value only (all powers of two); layout: one-hot; k: nothing
    assert enc.width == 2 + 1 + 3
    assert rows[0].tolist() == [16, 1, 1, 1, 0, 0]
    assert rows[1].tolist() == [64, 1, 4, 0, 0, 1]


def test_tied_values_give_each_number_and_the_choice():
    space = product(Param.of("m, n", [(4, 16), (8, 32)]), flag=[False, True])
    enc = Encoder(space)
    assert enc.rows(space.codes([3])).tolist() == [[8, 32, 1, 1]]  # m, n, which pair, flag


def test_many_choices_are_one_column():
    space = product(name=[f"v{i}" for i in range(20)])
    enc = Encoder(space)
    assert enc.width == 1
    assert np.array_equal(enc.rows(space.codes([5])), [[5.0]])
