"""tileauto.space.types: parameters, and a list of configs as a space."""

from __future__ import annotations

import pytest

from tileauto.errors import ConfigSpaceError
from tileauto.space import (
    ListSpace,
    Param,
    Space,
    as_space,
    product,
)


def test_tied_parameters_move_together():
    space = product(
        Param.of("micro_M, micro_N", [(4, 16), (8, 32)]),
        block_K=[16, 32],
        constraints="micro_N > block_K",
    )
    assert list(space) == [{"micro_M": 8, "micro_N": 32, "block_K": 16}]
    assert space.pruned == {"micro_N > block_K": 3}
    assert space.names == ("micro_M", "micro_N", "block_K")


@pytest.mark.parametrize(
    "name, values, says",
    [
        ("block_M", [], "no values"),
        ("block_M", [32, 32], "repeats a value"),
        ("block M", [1], "identifier"),
        ("micro_M, micro_N", [(4, 16), 8], "tuple of 2"),
        ("block_M", [object()], "plain data"),
        ("block_M", "64", "list of values"),
    ],
)
def test_bad_parameters_are_named(name, values, says):
    with pytest.raises(ConfigSpaceError, match=says):
        Param.of(name, values)


def test_a_list_of_configs_is_a_space_with_values_inferred():
    configs = [{"block_M": 64, "layout": "row"}, {"block_M": 32}, {"block_M": 128, "layout": "col"}]
    space = Space.from_configs(configs)
    assert isinstance(space, ListSpace) and list(space) == configs and len(space) == 3
    by_name = {p.name: p for p in space.params}
    assert by_name["block_M"].values == (32, 64, 128) and by_name["block_M"].ordered
    assert by_name["layout"].values[:2] == ("row", "col") and not by_name["layout"].ordered
    assert space.index_of(space.codes([2, 0, 1])).tolist() == [2, 0, 1]
    assert as_space(space) is space and list(as_space(configs)) == configs
