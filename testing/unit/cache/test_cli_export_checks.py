"""``cache export KEY DIR --trials FILE``: a FILE that cannot be written is refused before DIR is
written (a retry then does not find "DIR exists and is not an empty folder")."""

from __future__ import annotations

import pytest
from cache_fakes import fake_result, open_store, trial

from tileauto import cli


@pytest.fixture
def stored(tmp_path, tileauto_env):
    store = open_store()
    store.save(fake_result(tmp_path, [trial(0, {"block": 8}, 0.5), trial(1, {"block": 16})]))
    return store


@pytest.mark.parametrize(
    ("folder", "trials", "said"),
    [
        ("ship", "ship", "is DIR itself"),
        ("up/ship", "up", "is a folder above DIR"),
        ("ship", "a-file/t.json", "is not a folder: expected a file in a folder"),
    ],
)
def test_export_refuses_a_trials_file_it_cannot_write_before_writing_dir(
    stored, capsys, tmp_path, folder, trials, said
):
    (tmp_path / "a-file").write_text("mine")
    ship = tmp_path / folder
    code = cli.main(["cache", "export", stored.key, str(ship), "--trials", str(tmp_path / trials)])
    out, err = capsys.readouterr()
    assert code == 2 and said in err and "--trials" in err, err
    assert not ship.exists() and not (tmp_path / "up").exists() and out == ""
    assert (tmp_path / "a-file").read_text() == "mine"
