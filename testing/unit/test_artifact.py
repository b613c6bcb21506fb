"""tileauto.artifact: parameter and kernel records, their JSON round trip, shape expressions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tileauto.artifact import KernelArtifact, ParamSpec, evaluate_dim

A = ParamSpec("A", ("m", 64), "float16")
N = ParamSpec("n", (), "int32", scalar=True)
C = ParamSpec("C", ("m * 2", "floordiv(n, 4)"), "float32")


def artifact(directory: Path, **changes) -> KernelArtifact:
    fields = dict(
        directory=directory,
        func_name="main",
        params=(A, N, C),
        out_idx=(2,),
        target='{"kind": "llvm"}',
        device_type="cpu",
        config={"block": 128, "tag": "x"},
        compile_s=1.5,
        export_s=0.25,
    )
    fields.update(changes)
    return KernelArtifact(**fields)


# -- ParamSpec ----------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [A, N, C, ParamSpec("B", (8, 8), "bool")], ids=lambda s: s.name)
def test_param_spec_round_trips_through_json_text(spec):
    data = json.loads(json.dumps(spec.to_json()))
    assert ParamSpec.from_json(data) == spec
    assert ("scalar" in data) == spec.scalar  # buffers keep the old format (no key)


def test_param_spec_keeps_its_renamed_size_variables_through_json():
    spec = ParamSpec("B", ("n_1 * 2", 4), "float32", renamed=(("n_1", "n"),))
    data = json.loads(json.dumps(spec.to_json()))
    assert data["renamed"] == [["n_1", "n"]]
    assert ParamSpec.from_json(data) == spec
    assert spec.display_shape == ("n * 2", 4)
    assert "renamed" not in A.to_json()  # nothing renamed: the old format


def test_param_spec_from_old_json_has_nothing_renamed():
    spec = ParamSpec.from_json({"name": "n", "shape": [], "dtype": "int32", "scalar": True})
    assert spec.renamed == () and spec.size_var == "n" and spec.display_shape == ()


def test_a_scalar_renamed_apart_binds_its_key():
    assert ParamSpec("n", (), "int32", scalar=True, renamed=(("n_1", "n"),)).size_var == "n_1"


@pytest.mark.parametrize(
    "renamed, why",
    [
        ((("n_1",),), "pairs"),
        ((("n_1", 3),), "pairs"),
    ],
)
def test_a_bad_renamed_entry_in_json_is_an_error_naming_it(renamed, why):
    data = {"name": "B", "shape": ["n_1"], "dtype": "float32", "renamed": renamed}
    with pytest.raises(ValueError, match=f"ParamSpec 'B': renamed.*{why}"):
        ParamSpec.from_json(data)


def test_param_spec_from_old_json_without_scalar_is_a_buffer():
    assert ParamSpec.from_json({"name": "A", "shape": [4], "dtype": "int8"}) == ParamSpec(
        "A", (4,), "int8"
    )


def test_symbols_are_the_size_variables_that_stand_alone():
    assert A.symbols == ("m",)
    assert C.symbols == ()  # expressions bind nothing
    assert N.symbols == ()


def test_static_shape_is_the_ints_or_none():
    assert ParamSpec("B", (8, 16), "float32").static_shape == (8, 16)
    assert N.static_shape == ()
    assert A.static_shape is None
    assert C.static_shape is None


def test_resolve_shape_binds_variables_and_expressions():
    assert A.resolve_shape({"m": 3}) == (3, 64)
    assert C.resolve_shape({"m": 3, "n": 17}) == (6, 4)
    with pytest.raises(KeyError):
        A.resolve_shape({})


# -- KernelArtifact -----------------------------------------------------------------------------
def test_kernel_artifact_round_trips_through_json_text(tmp_path):
    art = artifact(tmp_path / "k")
    data = json.loads(json.dumps(art.to_json()))
    assert data["directory"] == str(tmp_path / "k")
    assert data["params"][1] == {"name": "n", "shape": [], "dtype": "int32", "scalar": True}
    back = KernelArtifact.from_json(data)
    assert back == art
    assert isinstance(back.directory, Path) and isinstance(back.out_idx, tuple)


def test_a_config_with_tuples_comes_back_with_them(tmp_path):
    # a tuned kernel loaded from the cache or a saved folder said {"tile": [16, 32]}: a
    # factory called with **kernel.config got a list
    import dataclasses

    art = dataclasses.replace(artifact(tmp_path / "k"), config={"tile": (16, 32), "n": 4})
    data = json.loads(json.dumps(art.to_json()))
    assert data["config"] == {"tile": [16, 32], "n": 4}
    assert KernelArtifact.from_json(data).config == {"tile": (16, 32), "n": 4}
    assert "config_literal" not in artifact(tmp_path / "k").to_json()  # plain JSON: as it was
    # a literal that is not the same config as the JSON (an edit of one of them) is not used
    data["config"]["n"] = 5
    assert KernelArtifact.from_json(data).config == {"tile": [16, 32], "n": 5}
    data["config_literal"] = "__import__('os')"
    assert KernelArtifact.from_json(data).config == {"tile": [16, 32], "n": 5}


def test_from_json_fills_optional_fields_and_overrides_the_directory(tmp_path):
    data = artifact(tmp_path / "old").to_json()
    for key in ("config", "compile_s", "export_s"):
        del data[key]
    back = KernelArtifact.from_json(data, directory=tmp_path / "new")
    assert back.directory == tmp_path / "new"
    assert (back.config, back.compile_s, back.export_s) == ({}, 0.0, 0.0)


def test_moved_to_changes_only_the_folder_and_copies_the_config(tmp_path):
    art = artifact(tmp_path / "a")
    moved = art.moved_to(tmp_path / "b")
    assert moved == artifact(tmp_path / "b")
    assert moved.lib_path == tmp_path / "b" / KernelArtifact.LIB_NAME
    moved.config["block"] = 1
    assert art.config["block"] == 128  # not shared with the original


def test_artifact_files_live_in_its_folder(tmp_path):
    art = artifact(tmp_path)
    assert art.lib_path == tmp_path / "kernel.so"
    assert {art.LIB_NAME, art.META, art.SCRIPT, art.KERNEL_SOURCE, art.HOST_SOURCE} == {
        "kernel.so",
        "kernel.json",
        "kernel_script.py",
        "kernel_source.txt",
        "host_source.txt",
    }


# -- shape expressions --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("n", 10),
        ("7", 7),
        ("n * 2 + 1", 21),
        ("(n - 2) // 3", 2),
        ("n % 4", 2),
        ("floordiv(n, 3)", 3),
        ("floormod(n, 3)", 1),
        ("floordiv(n * m, 4) + m", 10),
    ],
)
def test_evaluate_dim(expr, value):
    assert evaluate_dim(expr, {"n": 10, "m": 3}) == value


def test_evaluate_dim_names_an_unbound_variable():
    with pytest.raises(KeyError, match="k"):
        evaluate_dim("n * k", {"n": 2})


@pytest.mark.parametrize(
    "expr", ["n ** 2", "n / 2", "max(n, 2)", "__import__('os').getpid()", "n.real", "1.5"]
)
def test_evaluate_dim_refuses_anything_else(expr):
    with pytest.raises(ValueError, match="unsupported shape expression"):
        evaluate_dim(expr, {"n": 4})


def test_param_spec_keeps_an_alignment_other_than_tvms_default_through_json():
    spec = ParamSpec("A", (4,), "float32", align=16)
    assert spec.to_json()["align"] == 16
    assert ParamSpec.from_json(spec.to_json()) == spec
    assert "align" not in A.to_json()  # 64, TVM's default: the old format
    assert ParamSpec.from_json({"name": "A", "shape": [4], "dtype": "float32"}).align == 64
