"""tileauto.space.product: the lazy product, its constraint scan, and finding configs in it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tileauto.errors import ConfigSpaceError
from tileauto.space import (
    Param,
    Space,
    product,
)


def test_a_product_is_every_combination_in_itertools_order():
    space = product(block_M=[32, 64], block_N=[16, 32, 64], layout=["row", "col"])
    expected = [
        {"block_M": m, "block_N": n, "layout": lay}
        for m, n, lay in itertools.product([32, 64], [16, 32, 64], ["row", "col"])
    ]
    assert len(space) == 12 and list(space) == expected
    assert space[0] == expected[0] and space[-1] == expected[-1]
    assert [space.config(i) for i in range(12)] == expected
    with pytest.raises(IndexError):
        space[12]


def test_a_product_is_lazy_indexing_without_expanding():
    # 10^12 configs: len and indexing decode an index, nothing is listed
    space = product(**{f"p{k}": list(range(10)) for k in range(12)})
    assert len(space) == 10**12
    assert space[123_456_789_012] == {f"p{k}": int(d) for k, d in enumerate("000123456789012"[3:])}


def test_spaces_compose_by_product_and_by_more_constraints():
    tiles = product(block_M=[32, 64], constraints="block_M > 32")
    threads = product(threads=[128, 256])
    both = tiles * threads
    assert list(both) == [{"block_M": 64, "threads": 128}, {"block_M": 64, "threads": 256}]
    narrower = both.where("threads == 256")
    assert list(narrower) == [{"block_M": 64, "threads": 256}]
    assert narrower.pruned == {"block_M > 32": 2, "threads == 256": 1}
    with pytest.raises(ConfigSpaceError, match="more than once"):
        tiles * product(block_M=[1])


def test_codes_and_index_of_round_trip_and_miss_outside_the_space():
    space = product(a=[1, 2, 3], b=[10, 20], constraints="a + b != 12")
    codes = space.codes(np.arange(len(space)))
    assert space.index_of(codes).tolist() == list(range(len(space)))
    assert space.index_of([[1, 0]]).tolist() == [-1]  # a=2, b=10 was pruned
    assert space.index_of([[5, 0], [-1, 0]]).tolist() == [-1, -1]
    plain = product(a=[1, 2, 3], b=[10, 20])
    assert plain.index_of(plain.codes([4])).tolist() == [4]


def test_a_constrained_product_too_large_to_scan_is_refused_with_the_fix():
    with pytest.raises(ConfigSpaceError, match="tie parameters"):
        product(**{f"p{k}": list(range(10)) for k in range(9)}, constraints="p0 > 1")


def test_a_million_configs_are_indexed_without_a_dict_each():
    space = product(
        **{name: list(range(10)) for name in "abcdef"},
        constraints=["a % 2 == 0", "b + c < 12"],
    )
    assert len(space) == 500_000 * 72 // 100  # b + c >= 12 for 28 of the 100 (b, c)
    assert space._scan is not None and space._scan.arrays()[0].nbytes == len(space) * 2
    assert space._scan._valid.nbytes == len(space) * 2  # what doubling took is given back
    assert space[0] == dict.fromkeys("abcdef", 0)


def test_a_constrained_scan_keeps_two_bytes_per_valid_config():
    import tracemalloc

    # 2^22 combinations, 7/8 of them valid: 2 bytes each keep the peak well under 20 MiB
    space = product(**{f"p{k}": list(range(8)) for k in range(7)}, q=[0, 1], constraints="p0 != 3")
    tracemalloc.start()
    try:
        assert len(space) == 7 * 8**6 * 2
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20
    # indexing, decoding and finding configs agree with the product's order, across chunks
    expected = [i for i in range(8**7 * 2) if (i // (8**6 * 2)) != 3]
    picks = np.asarray([0, 1, 65_535, 65_536, 400_000, 1_234_567, len(space) - 1])
    codes = space.codes(picks)
    assert (space.index_of(codes) == picks).all()
    for i in picks.tolist():
        position = expected[i]
        assert space[i] == {**{f"p{k}": position // (8 ** (6 - k) * 2) % 8 for k in range(7)},
                            "q": position % 2}  # fmt: skip
    assert space.index_of([[3, 0, 0, 0, 0, 0, 0, 1]]).tolist() == [-1]


def test_find_is_the_inverse_of_config():
    space = product(
        Param.of("micro_M, micro_N", [(4, 16), (8, 32)]),
        block_M=[32, 64, 128],
        layout=["row", "col"],
        constraints=["block_M % micro_M == 0", "block_M > 32 or layout == 'row'"],
    )
    for i in range(len(space)):
        assert space.find(space[i]) == i
        assert space.find({**space[i], "other": 1}) == i  # other keys are ignored
    assert space.find({"micro_M": 4, "micro_N": 32, "block_M": 64, "layout": "row"}) == -1
    assert space.find({"micro_M": 4, "micro_N": 16, "block_M": 32, "layout": "col"}) == -1
    assert space.find({"micro_M": 4, "micro_N": 16, "block_M": 64}) == -1  # a key missing
    listed = Space.from_configs([{"a": 1}, {"a": 2, "b": "x"}])
    assert [listed.find(c) for c in listed] == [0, 1]


def test_equal_numbers_of_two_types_are_one_value_and_refused():
    # hunt D, bug 11: 64 and 64.0 are one kernel config, compiled and measured twice
    with pytest.raises(ConfigSpaceError, match=r"'block' repeats a value: 64 and 64.0"):
        product(block=[64, 64.0], unroll=[1, 2])
    with pytest.raises(ConfigSpaceError, match="'t, u' repeats a value"):
        product(Param.of("t, u", [(1, 2), (1.0, 2.0)]))
    assert len(product(flag=[0, False, 1, True])) == 4  # bools stay apart from numbers
