"""tileauto.space.view.SpaceView.own: configs read back from JSON get the space's own values."""

from __future__ import annotations

import json

from tileauto.space import product
from tileauto.space.view import SpaceView


def from_json(config: dict) -> dict:
    return json.loads(json.dumps(config))


def test_a_tuple_read_back_as_a_list_is_the_spaces_tuple_again():
    configs = [{"tile": (8, 8), "order": "ij"}, {"tile": (16, 4), "order": {"k": (1, 2)}}]
    view = SpaceView(configs, {"tile": (8, 8), "order": "ij"})
    for config in configs:
        stored = from_json(config)
        assert stored != config  # a list is not a tuple
        assert view.own(stored) == config
    # a lazy product finds it by its index, never expanding the space
    space = product(tile=[(8, 8), (16, 4), (32, 2)], unroll=[1, 2])
    lazy = SpaceView(space, {"tile": (8, 8), "unroll": 1})
    assert lazy.own({"tile": [32, 2], "unroll": 2}) == {"tile": (32, 2), "unroll": 2}


def test_a_config_without_lists_or_not_in_the_space_is_returned_as_it_is():
    view = SpaceView([{"block": 8}, {"block": 16}], {"block": 8})
    plain = {"block": 16}
    assert view.own(plain) is plain
    elsewhere = {"block": [1, 2]}  # a stored config of another space: nothing to restore
    assert view.own(elsewhere) is elsewhere


def test_a_values_key_is_equal_exactly_where_its_json_is():
    import enum
    import itertools

    from tileauto.space._values import config_id, value_key

    class Size(enum.IntEnum):
        SMALL = 1

    values = [
        0,
        1,
        -1,
        1.0,
        -0.0,
        0.0,
        True,
        False,
        None,
        "1",
        "a",
        Size.SMALL,
        2**70,
        float("inf"),
        float("nan"),
        (1, 2),
        [1, 2],
        {"k": 1},
        1e16,
        10**16,
    ]
    for a, b in itertools.product(values, repeat=2):
        same_json = config_id({"v": a}) == config_id({"v": b})
        assert (value_key(a) == value_key(b)) == same_json, (a, b)


def test_a_pass_configs_entry_does_not_make_the_first_config_the_default():
    # pass_configs is no parameter of the factory: the default config stays the factory's
    configs = [{"block": 4}, {"block": 32, "pass_configs": {"tirx.disable_vectorize": True}}]
    view = SpaceView(configs, {"block": 16})
    assert view.default == {"block": 16}  # no pass_configs key it does not set (was: None)
    assert SpaceView([{"block": 4}], {}).default == {"block": 4}  # no default: the first
