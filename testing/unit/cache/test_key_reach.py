"""tileauto.cache.key: the key covers everything a factory can reach, and nothing else.

Each case writes a small user project (one or more module files) into its own folder, imports
it fresh and fingerprints ``kmod.factory``. Every edit of something the factory reaches must
change the key (a miss); a comment, another function in the same file, reformatting and a
docstring must not (a hit).
"""

from __future__ import annotations

import importlib
import itertools
import json
import logging
import os
import platform
import re
import subprocess
import sys
import textwrap
import threading
import types
import warnings
from collections.abc import Callable

import pytest
from cache_fakes import DEVICE, TARGET

import tileauto.cli
from tileauto.cache import _imports, walk
from tileauto.cache import key as K
from tileauto.cache.kernels import KernelStore
from tileauto.cache.tuning import TuningStore
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.settings import Settings

Files = dict[str, str]  # module path without ".py" ("kmod", "pkg/__init__") -> source
_folders = itertools.count()


@pytest.fixture
def load(tmp_path) -> Callable[[Files], object]:
    """Write ``files`` to a new folder and import ``kmod`` from it, as a new process would."""

    def load_project(files: Files) -> object:
        root = tmp_path / f"v{next(_folders)}"
        names = [path.replace("/", ".").removesuffix(".__init__") for path in files]
        for path, text in files.items():
            target = root / f"{path}.py"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(textwrap.dedent(text))
        _forget(names)
        sys.path.insert(0, str(root))
        try:
            importlib.invalidate_caches()
            return importlib.import_module("kmod")
        finally:
            sys.path.remove(str(root))
            _forget(names)  # the next version imports its own modules of the same names

    return load_project


def _forget(names: list[str]) -> None:
    for name in names:
        sys.modules.pop(name, None)


def key_of(module) -> str:
    return K.digest(K.function_fingerprint(module.factory))


# -- edits that must not change the key -------------------------------------------------------
def add_comments(files: Files) -> Files:
    return {p: "# a comment\n" + t.replace("):\n", "):  # trailing\n") for p, t in files.items()}


def add_function(files: Files) -> Files:
    return {p: t + "\n\ndef unrelated(x):\n    return x - 42\n" for p, t in files.items()}


def reformat(files: Files) -> Files:
    """Blank lines, spaces inside brackets and around commas (the sources hold no strings)."""
    out = {}
    for path, text in files.items():
        text = text.replace("(", "( ").replace(",", " ,").replace("\n    return", "\n\n    return")
        out[path] = "\n\n" + text
    return out


def add_docstrings(files: Files) -> Files:
    def doc(match: re.Match) -> str:
        indent = match.group(1) + "    "
        return f'{match.group(0)}{indent}"""What {match.group(2)} does."""\n'

    pattern = re.compile(r"^( *)(?:def|class) (\w+)\b.*:\n", re.MULTILINE)
    return {p: pattern.sub(doc, t) for p, t in files.items()}


UNRELATED = [add_comments, add_function, reformat, add_docstrings]


def check(load, base: Files, *edits: Callable[[Files], Files]) -> None:
    """Every edit misses; every unrelated change (and a fresh import) hits."""
    base = {path: textwrap.dedent(text) for path, text in base.items()}
    expected = key_of(load(base))
    assert key_of(load(base)) == expected
    for unrelated in UNRELATED:
        assert key_of(load(unrelated(base))) == expected, f"{unrelated.__name__} missed"
    for i, edit in enumerate(edits):
        assert key_of(load(edit(base))) != expected, f"edit {i} hit the old key"


def replace(path: str, old: str, new: str) -> Callable[[Files], Files]:
    def edit(files: Files) -> Files:
        assert old in files[path], f"{old!r} not in {path}"
        return {**files, path: files[path].replace(old, new)}

    return edit


# -- what the factory reaches --------------------------------------------------------------------
def test_a_global_read_inside_a_lambda(load):
    base = {
        "kmod": """
            OFFSET = 0.0

            def factory(n):
                f = lambda i: i + OFFSET
                return f(n)
            """
    }
    check(load, base, replace("kmod", "OFFSET = 0.0", "OFFSET = 1.0"))


def test_a_global_read_inside_a_nested_def(load):
    base = {
        "kmod": """
            OFFSET = 0.0

            def factory(n):
                def inner(i):
                    return i + OFFSET
                return inner(n)
            """
    }
    check(load, base, replace("kmod", "OFFSET = 0.0", "OFFSET = 1.0"))


def test_a_global_read_inside_a_comprehension(load):
    base = {
        "kmod": """
            OFFSET = 0.0

            def factory(n):
                return [i + OFFSET for i in range(n)]
            """
    }
    check(load, base, replace("kmod", "OFFSET = 0.0", "OFFSET = 1.0"))


def test_a_helper_called_inside_a_lambda(load):
    base = {
        "kmod": """
            def helper(x):
                return x * 2

            def factory(n):
                f = lambda i: helper(i)
                return f(n)
            """
    }
    check(load, base, replace("kmod", "x * 2", "x * 3"))


def test_a_helper_of_a_helper_in_other_module_files(load):
    base = {
        "kmod": """
            from helpers import outer

            def factory(n):
                f = lambda i: outer(i)
                return f(n)
            """,
        "helpers": """
            import deep

            def outer(x):
                return deep.inner(x) + 1
            """,
        "deep": """
            SHIFT = 0

            def inner(x):
                return x * 2 + SHIFT
            """,
    }
    check(
        load,
        base,
        replace("deep", "x * 2", "x * 3"),
        replace("deep", "SHIFT = 0", "SHIFT = 1"),
        replace("helpers", "+ 1", "+ 2"),
    )


def test_a_closure_cell_value(load):
    base = {
        "kmod": """
            def make(scale, helper):
                def factory(n):
                    return [helper(i) * scale for i in range(n)]
                return factory

            def double(x):
                return x * 2

            factory = make(2, double)
            """
    }
    check(
        load,
        base,
        replace("kmod", "make(2, double)", "make(3, double)"),
        replace("kmod", "x * 2", "x * 3"),  # a function held in a cell, by its code
    )


def test_default_argument_values_positional_and_keyword_only(load):
    base = {
        "kmod": """
            BLOCK = 16
            SCALE = 2

            def helper(x, k=BLOCK):
                return x + k

            def factory(n, *, scale=SCALE):
                f = lambda i: helper(i) * scale
                return f(n)
            """
    }
    check(
        load,
        base,
        replace("kmod", "BLOCK = 16", "BLOCK = 32"),  # a helper's positional default
        replace("kmod", "SCALE = 2", "SCALE = 3"),  # the factory's keyword-only default
    )


def test_a_module_attribute_chain(load):
    base = {
        "kmod": """
            import cfg
            import pkg.sub

            def factory(n):
                f = lambda i: i + cfg.OFFSET + pkg.sub.DEPTH
                return f(n)
            """,
        "cfg": """
            OFFSET = 0.0
            NOT_READ = 1
            """,
        "pkg/__init__": "",
        "pkg/sub": "DEPTH = 1\n",
    }
    check(
        load,
        base,
        replace("cfg", "OFFSET = 0.0", "OFFSET = 1.0"),
        replace("pkg/sub", "DEPTH = 1", "DEPTH = 2"),
    )
    # only the attribute read counts, not the rest of the module
    expected = key_of(load(base))
    assert key_of(load(replace("cfg", "NOT_READ = 1", "NOT_READ = 2")(base))) == expected


def test_a_user_class_method_and_class_attribute(load):
    base = {
        "kmod": """
            class Scaler:
                FACTOR = 2

                def apply(self, x):
                    return x * self.FACTOR + 1

            SHARED = Scaler()
            SHARED.bias = 0

            def factory(n):
                s = Scaler()
                return [s.apply(i) + SHARED.bias for i in range(n)]
            """
    }
    check(
        load,
        base,
        replace("kmod", "FACTOR = 2", "FACTOR = 3"),
        replace("kmod", "+ 1", "+ 2"),
        replace("kmod", "SHARED.bias = 0", "SHARED.bias = 5"),  # an instance's attribute
    )


def test_recursion_and_cycles_terminate_and_are_stable(load):
    base = {
        "kmod": """
            import other

            VALUE = 1
            LOOP = []
            LOOP.append(LOOP)

            class Node:
                pass

            NODE = Node()
            NODE.me = NODE

            def countdown(k):
                return 0 if k == 0 else countdown(k - 1)

            def even(k):
                return k == 0 or odd(k - 1)

            def odd(k):
                return k != 0 and even(k - 1)

            def factory(n):
                f = lambda i: countdown(i) + even(i) + len(LOOP) + other.back.VALUE
                return f(n), NODE
            """,
        # two user modules that import each other: other.back is kmod
        "other": "import kmod as back\n",
    }
    check(
        load,
        base,
        replace("kmod", "k - 1)\n\ndef even", "k - 2)\n\ndef even"),
        replace("kmod", "k != 0 and", "k != 1 and"),
        replace("kmod", "VALUE = 1", "VALUE = 2"),  # read through the import cycle
    )


def test_decorated_helpers_and_a_decorated_factory(load):
    base = {
        "kmod": """
            import functools

            SHIFT = 0

            def with_shift(fn):
                @functools.wraps(fn)
                def wrapper(n):
                    return fn(n + SHIFT)
                return wrapper

            @functools.lru_cache(maxsize=None)
            def helper(x):
                return x * 2

            @with_shift
            def factory(n):
                return [helper(i) for i in range(n)]
            """
    }
    check(
        load,
        base,
        replace("kmod", "x * 2", "x * 3"),  # behind the library's lru_cache wrapper
        replace("kmod", "SHIFT = 0", "SHIFT = 1"),  # read by the user's own decorator
        # the wrapper's own body: its source was read through __wrapped__ (the factory's)
        replace("kmod", "fn(n + SHIFT)", "fn(n + SHIFT + 1)"),
    )


def test_a_module_the_factory_imports_in_its_body(tmp_path):
    """``from helpers import body`` inside the factory: the module is no global of it, and an
    edit of ``helpers.py`` hit the old key (a fresh process reused the old kernel). The key is
    the same before and after the module's first import (a process that imported it for
    another reason must hit an entry of one that did not), and for an installed module."""
    texts = {
        "kmod": "def factory(n):\n    from helpers import body\n    from .. import x\n"
        "    import json, email.mime.text\n    return body(n)\n",
        "helpers": "def body(n):\n    return n * 2\n",
    }
    keys = []
    for version, helper in enumerate(["n * 2", "n * 2", "n * 3"]):
        root = tmp_path / f"v{version}"
        root.mkdir()
        (root / "kmod.py").write_text(texts["kmod"])
        (root / "helpers.py").write_text(texts["helpers"].replace("n * 2", helper))
        _forget(["kmod", "helpers"])
        sys.path.insert(0, str(root))
        try:
            importlib.invalidate_caches()
            module = importlib.import_module("kmod")
            keys.append(key_of(module))
            sys.modules.pop("email.mime.text", None)
            importlib.import_module("helpers")  # as after the factory's first call
            importlib.import_module("email.mime.text")
            assert key_of(module) == keys[-1]
        finally:
            sys.path.remove(str(root))
            _forget(["kmod", "helpers"])
    assert keys[0] == keys[1] != keys[2]


def test_caches_python_adds_later_do_not_change_the_key(load):
    module = load(
        {
            "kmod": """
                class Slotted:
                    __slots__ = ("a",)

                    def __init__(self):
                        self.a = 1

                VALUE = Slotted()

                def factory(n):
                    return VALUE.a + n
                """
        }
    )
    before = key_of(module)
    module.VALUE.__reduce_ex__(2)  # as pickle does: caches __slotnames__ on the class
    assert "__slotnames__" in vars(module.Slotted)
    assert key_of(module) == before


def test_installed_code_counts_by_version_not_walked():
    import numpy as np

    helper = K.describe_key_value(json.dumps)
    assert helper == {"fn": "json.dumps", "lib": f"python=={platform.python_version()}"}
    array_fn = K.describe_key_value(np.zeros)
    assert array_fn["lib"] == f"numpy=={np.__version__}"
    assert K.describe_key_value(np)["module"] == "numpy"


# -- what cannot be keyed ------------------------------------------------------------------------
def test_unkeyable_values_raise_with_their_path(load):
    module = load(
        {
            "kmod": """
                import threading

                LOCK = threading.Lock()

                def helper(x):
                    with LOCK:
                        return x

                def factory(n):
                    return (lambda i: helper(i))(n)
                """
        }
    )
    with pytest.raises(K.UnkeyableError) as caught:
        K.function_fingerprint(module.factory)
    assert caught.value.path == "global 'helper.LOCK'"
    assert "_thread.lock without a stable description" in caught.value.reason
    with open(os.devnull) as handle, pytest.raises(K.UnkeyableError, match="TextIOWrapper"):
        K.describe_key_value({"log": handle})
    with pytest.raises(K.UnkeyableError, match=r"argument 'w\[lock\]' \(object of type _thread"):
        K.describe_arguments({"w": {"lock": threading.RLock()}})
    with pytest.raises(K.UnkeyableError, match=r"cannot key global 'X' of ref_prog"):
        K.function_fingerprint(_reads_opaque, owner="ref_prog")


X = threading.Lock()
_LOCKED = threading.Lock()


def _reads_opaque(a):
    return a, X


def _makes_a_lock(n, block=16):
    return n * block, threading.Lock  # the function that makes locks is keyable; a lock is not


def _uses_the_lock(n, block=16):
    with _LOCKED:
        return n * block


def test_an_unkeyable_factory_is_one_warning_and_no_store(caplog):
    K._REPORTED.messages.clear()
    caplog.set_level(logging.WARNING, logger="tileauto.cache")
    settings = Settings.from_env()
    assert K.function_fingerprint(_makes_a_lock)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            store = KernelStore.open(
                settings,
                _uses_the_lock,
                {"n": 64, "block": 16},
                CompileArgs(out_idx=[-1]),
                target=TARGET,
                device=DEVICE,
            )
            assert store is None
            tuning = TuningStore.open(
                settings,
                _uses_the_lock,
                (64,),
                {},
                [{"block": 8}],
                CompileArgs(out_idx=[-1]),
                ProfileArgs(warmup=1, rep=3),
                None,
                target=TARGET,
                device=DEVICE,
            )
            assert tuning is None
    warned = [str(w.message) for w in caught if "cannot key" in str(w.message)]
    assert len(warned) == 1 and "_LOCKED" in warned[0]  # once, though asked four times
    said = [r.getMessage() for r in caplog.records if "cannot key" in r.getMessage()]
    assert said == [
        "_uses_the_lock: cannot key global '_LOCKED' (object of type _thread.lock without a "
        "stable description): results are not cached"
    ]


# -- the same code gives the same key in a new process ------------------------------------------
STABLE = {
    "kmod": """
        import cfg

        WORDS = {"alpha", "beta", "gamma", "delta"}
        TABLE = {3: "c", 1: "a", (2, "b"): frozenset({"x", "y"})}

        class Mode:
            FAST = 1

        def helper(x, *, k=2):
            return x * k

        def factory(n, block=16):
            g = lambda i: helper(i) + cfg.OFFSET + len(WORDS) + len(TABLE) + Mode.FAST
            return [g(i) for i in range(n)], {helper, g}
        """,
    "cfg": "OFFSET = 0.5\n",
}

CHILD = """
import importlib, sys
sys.path.insert(0, sys.argv[1])
from tileauto.cache import key as K
print(K.digest(K.function_fingerprint(importlib.import_module("kmod").factory)))
"""


def test_the_key_is_the_same_in_new_processes_whatever_the_hash_seed(load, tmp_path):
    expected = key_of(load(STABLE))
    project = tmp_path / "stable"
    for path, text in STABLE.items():
        (project / f"{path}.py").parent.mkdir(parents=True, exist_ok=True)
        (project / f"{path}.py").write_text(textwrap.dedent(text))
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(project)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "12345")
    ]
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        assert out.strip() == expected


def _imports_by_dis(code: types.CodeType, package: str | None) -> list[str]:
    """What ``_imports.imported_modules`` reads, by ``dis`` (its own decoder is ~40x faster)."""
    import dis
    import importlib.util

    out: dict[str, None] = {}
    consts: list = []
    for ins in dis.get_instructions(code):
        if ins.opname == "IMPORT_NAME":
            level = consts[-2] if len(consts) >= 2 and type(consts[-2]) is int else 0
            name = ins.argval
            if level:
                try:
                    name = importlib.util.resolve_name("." * level + name, package)
                except (ImportError, ValueError, TypeError):
                    continue
            if name:
                out[name] = None
        consts = (
            [*consts[-1:], ins.argval] if ins.opname in ("LOAD_CONST", "LOAD_SMALL_INT") else []
        )
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out.update(dict.fromkeys(_imports_by_dis(const, package)))
    return list(out)


def test_the_import_reader_reads_what_dis_reads():
    import email.message
    import inspect as inspect_mod
    import json.decoder

    def relative():
        import os.path  # noqa: F401

        from ..up import thing  # noqa: F401
        from . import sibling  # noqa: F401

        def nested():
            from tvm import te  # noqa: F401

        return nested

    assert _imports.imported_modules(relative.__code__, "pkg.sub") == [
        "os.path",
        "pkg.up",
        "pkg.sub",
        "tvm",
    ]
    checked = 0
    for mod in (walk, _imports, inspect_mod, json.decoder, email.message, tileauto.cli):
        for value in vars(mod).values():
            if isinstance(value, types.FunctionType):
                code, package = value.__code__, mod.__package__
                assert _imports.imported_modules(code, package) == _imports_by_dis(code, package)
                checked += 1
    assert checked > 100
