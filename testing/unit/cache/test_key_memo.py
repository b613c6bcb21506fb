"""tileauto.cache.key: a function's normalized source, remembered per source file's contents."""

from __future__ import annotations

import importlib.util
import itertools
import textwrap

import pytest

from tileauto.cache import _code as C
from tileauto.cache import key as K
from tileauto.settings import Settings

_counter = itertools.count()

SOURCE = '''
SCALE = 2.0


def helper(x):
    return x + 1


def factory(n, block=16):
    """Docstring."""
    return helper(n) * SCALE + block
'''


def load(path, source: str):
    """Import ``source`` from the file ``path`` as a fresh module."""
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(f"memomod{next(_counter)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fresh_process() -> None:
    """What a new process remembers in memory: nothing."""
    C._sources_at.cache_clear()


def memo_files() -> list:
    folder = Settings.from_env().cache_dir / C.SOURCES_DIR
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def refuse_parsing(monkeypatch) -> None:
    def parse(fn):
        raise AssertionError(f"{fn.__qualname__} was parsed again")

    monkeypatch.setattr(C, "_parsed_dump", parse)


@pytest.fixture(autouse=True)
def forget():
    fresh_process()
    yield
    fresh_process()


def test_a_second_process_reads_the_dumps_instead_of_parsing(tmp_path, monkeypatch):
    module = load(tmp_path / "m.py", SOURCE)
    first = K.function_fingerprint(module.factory)
    assert len(memo_files()) == 1
    assert memo_files()[0].stat().st_mode & 0o777 == 0o600
    fresh_process()
    refuse_parsing(monkeypatch)
    assert K.function_fingerprint(module.factory) == first


def test_an_edit_is_other_contents_and_is_parsed(tmp_path, monkeypatch):
    path = tmp_path / "m.py"
    before = K.function_fingerprint(load(path, SOURCE).factory)
    edited = load(path, SOURCE.replace("+ block", "- block"))
    fresh_process()
    after = K.function_fingerprint(edited.factory)
    assert after != before and len(memo_files()) == 2
    # the same edit again: answered by its own memo
    fresh_process()
    refuse_parsing(monkeypatch)
    assert K.function_fingerprint(edited.factory) == after


def test_the_memo_gives_what_parsing_gives(tmp_path):
    module = load(tmp_path / "m.py", SOURCE)
    remembered = K.function_fingerprint(module.factory)  # parsed, then written
    fresh_process()
    from_memo = K.function_fingerprint(module.factory)
    assert from_memo == remembered
    assert C._source_dump(module.helper) == C._parsed_dump(module.helper)


@pytest.mark.parametrize("damage", ["writable_by_others", "not_json", "other_format"])
def test_a_memo_that_cannot_be_trusted_is_parsed_again(tmp_path, monkeypatch, damage):
    module = load(tmp_path / "m.py", SOURCE)
    K.function_fingerprint(module.factory)
    (path,) = memo_files()
    if damage == "writable_by_others":
        path.chmod(0o666)
    elif damage == "not_json":
        path.write_text("{")
    else:
        path.write_text('{"format": 99, "answers": {}}')
    fresh_process()
    refuse_parsing(monkeypatch)
    with pytest.raises(AssertionError, match="parsed again"):
        K.function_fingerprint(module.factory)


def test_code_without_a_file_is_keyed_without_a_memo(tmp_path):
    space: dict = {}
    exec(compile(textwrap.dedent(SOURCE), "<generated>", "exec"), space)  # noqa: S102
    assert K.function_fingerprint(space["factory"])  # by bytecode: no source to read
    assert memo_files() == []


def test_with_the_caches_off_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAUTO_DISABLE_CACHE", "1")
    module = load(tmp_path / "m.py", SOURCE)
    assert K.function_fingerprint(module.factory)
    assert memo_files() == []
