"""tileauto.cache.key: what changes a fingerprint and what does not."""

from __future__ import annotations

import functools
import importlib.util
import itertools
import textwrap

import numpy as np
import torch

from tileauto.cache import key as K

_counter = itertools.count()

BASE = '''
SCALE = 2.0


def helper(x):
    return x + 1


def factory(n, block=16):
    """Docstring."""
    # a comment
    total = helper(n) * SCALE
    return total + block
'''

REFORMATTED = '''
SCALE = 2.0


def helper(x):
    return x + 1


def factory(
    n,
    block = 16,
):
    """Another docstring, reworded."""

    # a reworded comment, and blank lines
    total = helper(
        n
    ) * SCALE  # trailing comment
    return total + block
'''


def load(tmp_path, source: str):
    """Import ``source`` as a fresh module from a real file (getsource needs one)."""
    name = f"keymod{next(_counter)}"
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fp(module) -> str:
    return K.digest(K.function_fingerprint(module.factory))


def test_reformatting_comments_and_docstrings_keep_the_fingerprint(tmp_path):
    assert fp(load(tmp_path, BASE)) == fp(load(tmp_path, REFORMATTED))


def test_a_code_change_changes_the_fingerprint(tmp_path):
    base = fp(load(tmp_path, BASE))
    assert fp(load(tmp_path, BASE.replace("return total + block", "return total - block"))) != base
    assert fp(load(tmp_path, BASE.replace("block=16", "block=32"))) != base  # a default
    assert fp(load(tmp_path, BASE.replace("SCALE = 2.0", "SCALE = 3.0"))) != base  # a global
    assert fp(load(tmp_path, BASE.replace("return x + 1", "return x + 2"))) != base  # a helper


def test_own_decorators_do_not_count_but_nested_ones_do(tmp_path):
    plain = load(
        tmp_path, "def factory(n):\n    def inner():\n        return n\n    return inner\n"
    )
    decorated = load(
        tmp_path,
        "import functools\n\n@functools.lru_cache\ndef factory(n):\n"
        "    def inner():\n        return n\n    return inner\n",
    )
    nested = load(
        tmp_path,
        "import functools\n\ndef factory(n):\n    @functools.lru_cache\n"
        "    def inner():\n        return n\n    return inner\n",
    )
    assert K.normalized_source(plain.factory) == K.normalized_source(decorated.factory)
    assert K.normalized_source(plain.factory) != K.normalized_source(nested.factory)


def test_closure_values_count(tmp_path):
    def make(scale):
        def ref(a):
            return a * scale

        return ref

    assert K.digest(K.function_fingerprint(make(2))) == K.digest(K.function_fingerprint(make(2)))
    assert K.digest(K.function_fingerprint(make(2))) != K.digest(K.function_fingerprint(make(3)))


def test_lambdas_count_by_bytecode_and_two_on_one_line_differ():
    a, b = (lambda x: x * 2), (lambda x: x * 3)
    assert K.function_fingerprint(a) != K.function_fingerprint(b)
    assert K.function_fingerprint(a) == K.function_fingerprint(lambda x: x * 2)


def test_tensors_in_closures_count_by_content_call_arguments_by_layout():
    w1, w2 = torch.ones(4), torch.zeros(4)
    assert K.describe_key_value(w1) != K.describe_key_value(w2)
    assert K.describe_key_value(w1) == K.describe_key_value(torch.ones(4))
    assert K.describe_key_value(np.ones(3)) != K.describe_key_value(np.zeros(3))
    assert K.describe_arguments({"a": w1}) == K.describe_arguments({"a": w2})
    assert K.describe_arguments({"a": w1}) != K.describe_arguments({"a": torch.ones(5)})
    assert K.describe_arguments({"a": w1}) != K.describe_arguments({"a": w1.double()})


class Thing:
    def __init__(self, size):
        self.size = size


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, a):
        return a * self.factor


def test_objects_with_default_reprs_count_by_type_and_state_not_address():
    assert K.describe_key_value(Thing(3)) == K.describe_key_value(Thing(3))
    assert K.describe_key_value(Thing(3)) != K.describe_key_value(Thing(4))
    assert "0x" not in K.digest(K.describe_key_value(Thing(3)))


def test_partials_methods_and_callable_objects():
    def f(a, b):
        return a + b

    assert K.function_fingerprint(functools.partial(f, 1)) == K.function_fingerprint(
        functools.partial(f, 1)
    )
    assert K.function_fingerprint(functools.partial(f, 1)) != K.function_fingerprint(
        functools.partial(f, 2)
    )
    assert K.function_fingerprint(Scaler(2)) == K.function_fingerprint(Scaler(2))
    assert K.function_fingerprint(Scaler(2)) != K.function_fingerprint(Scaler(3))
    assert "0x" not in repr(K.function_fingerprint(Scaler(2).__call__))


def test_library_functions_count_by_name_library_objects_by_state():
    assert K.describe_key_value(torch.matmul)["fn"].endswith("matmul")
    allclose = K.describe_key_value(np.allclose)
    assert allclose["fn"] == "numpy.allclose" and allclose["lib"] == f"numpy=={np.__version__}"
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    with torch.no_grad():
        b.weight.add_(1)
    assert K.describe_key_value(a) != K.describe_key_value(b)


def test_versions_without_importing_tvm_here():
    v = K.versions()
    assert v["format"] == str(K.FORMAT_VERSION) and v["tvm"] and v["tileauto"]


def test_digest_is_canonical():
    assert K.digest({"a": 1, "b": [1, 2]}) == K.digest({"b": [1, 2], "a": 1})
    assert len(K.digest({})) == 32
