"""Records describing a compiled kernel on disk: its parameters and its files.

These cross process boundaries (compile workers return them) and are stored in the cache as
JSON, so they hold only plain data: no TVM or torch objects.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

Dim = int | str  # a static extent, or a symbolic expression over the kernel's size variables

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a kernel: a buffer (name, shape of ints or symbols, dtype), or a
    scalar (``scalar=True``, shape ``()``: an int or float argument such as an alpha).

    A size variable is written in ``shape`` by its key, which is unique to the variable: two
    distinct variables both named ``n`` have the keys ``n`` and ``n_1`` (as TVMScript prints
    them). ``renamed`` holds the ``(key, name)`` pairs of this parameter's variables whose key
    is not their name; messages show the names (:attr:`display_shape`). For a scalar, the pair
    is the key of the size variable the scalar itself is.
    """

    name: str
    shape: tuple[Dim, ...]
    dtype: str
    scalar: bool = False
    renamed: tuple[tuple[str, str], ...] = ()
    #: the byte alignment the compiled code assumes of a buffer's data (TVM's
    #: ``data_alignment``, 64 unless the PrimFunc says otherwise); a call checks it
    align: int = 64

    @property
    def symbols(self) -> tuple[str, ...]:
        """Names of the size variables that appear alone as a dimension."""
        return tuple(d for d in self.shape if isinstance(d, str) and d.isidentifier())

    @property
    def size_var(self) -> str:
        """The key of the size variable a scalar parameter binds (its name unless renamed)."""
        return self.renamed[0][0] if self.scalar and self.renamed else self.name

    @property
    def display_shape(self) -> tuple[Dim, ...]:
        """The shape with each size variable written by its name, for messages."""
        if not self.renamed:
            return self.shape
        names = dict(self.renamed)
        return tuple(
            d if isinstance(d, int) else _IDENTIFIER.sub(lambda m: names.get(m[0], m[0]), d)
            for d in self.shape
        )

    def size_names(self) -> dict[str, str]:
        """The name of each size variable in :attr:`shape`, by its key."""
        names = dict(self.renamed)
        return {
            key: names.get(key, key)
            for d in self.shape
            if isinstance(d, str)
            for key in _IDENTIFIER.findall(d)
            if key not in _FUNCTIONS
        }

    @property
    def static_shape(self) -> tuple[int, ...] | None:
        """The shape as ints, or None when a dimension is symbolic."""
        dims = tuple(d for d in self.shape if isinstance(d, int))
        return dims if len(dims) == len(self.shape) else None

    def resolve_shape(self, bindings: dict[str, int]) -> tuple[int, ...]:
        """The concrete shape once the size variables are bound."""
        return tuple(d if isinstance(d, int) else evaluate_dim(d, bindings) for d in self.shape)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.scalar:
            data["scalar"] = True
        if self.renamed:  # absent when nothing is renamed: the format of older entries
            data["renamed"] = [list(pair) for pair in self.renamed]
        if self.align != 64:  # absent: TVM's default, the format of older entries
            data["align"] = self.align
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ParamSpec:
        """The record :meth:`to_json` wrote (``renamed`` may be absent: nothing renamed).

        Raises:
            ValueError: ``renamed`` is not a list of ``[key, name]`` pairs of strings.
        """
        renamed = data.get("renamed", [])
        pairs = tuple(tuple(p) for p in renamed) if isinstance(renamed, list) else None
        if pairs is None or not all(
            len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs
        ):
            raise ValueError(
                f"ParamSpec {data.get('name')!r}: renamed must be a list of [key, name] pairs "
                f"of strings, got {renamed!r}"
            )
        return cls(
            name=data["name"],
            shape=tuple(data["shape"]),
            dtype=data["dtype"],
            scalar=bool(data.get("scalar", False)),
            renamed=pairs,
            align=int(data.get("align", 64)),
        )


@dataclass(frozen=True)
class KernelArtifact:
    """A compiled kernel exported to a directory: shared library, sources and parameters.

    Attributes:
        directory: folder holding the files below.
        func_name: the entry function inside the shared library.
        params: every buffer parameter, in call order.
        out_idx: positions (non-negative) of the parameters allocated and returned by a call.
        target: the TVM target as JSON text.
        device_type: "cpu" or "cuda": where the tensors must live.
        config: the tunable arguments this kernel was built with.
        compile_s: seconds spent elaborating and compiling (not exporting).
        export_s: seconds spent writing the shared library.
    """

    directory: Path
    func_name: str
    params: tuple[ParamSpec, ...]
    out_idx: tuple[int, ...]
    target: str
    device_type: str
    config: dict[str, Any] = field(default_factory=dict)
    compile_s: float = 0.0
    export_s: float = 0.0

    LIB_NAME = "kernel.so"
    KERNEL_SOURCE = "kernel_source.txt"
    HOST_SOURCE = "host_source.txt"
    SCRIPT = "kernel_script.py"
    META = "kernel.json"
    FILES = (LIB_NAME, KERNEL_SOURCE, HOST_SOURCE, SCRIPT)  # a complete kernel folder, META aside

    @property
    def lib_path(self) -> Path:
        return self.directory / self.LIB_NAME

    def missing_files(self) -> tuple[str, ...]:
        """The names of :attr:`FILES` that are not files in :attr:`directory`."""
        return tuple(name for name in self.FILES if not (self.directory / name).is_file())

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["directory"] = str(self.directory)
        data["params"] = [p.to_json() for p in self.params]
        data["out_idx"] = list(self.out_idx)
        if _json_copy(self.config) != self.config:  # a tuple would come back a list
            data[_CONFIG_LITERAL] = repr(self.config)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], directory: Path | None = None) -> KernelArtifact:
        return cls(
            directory=Path(directory if directory is not None else data["directory"]),
            func_name=data["func_name"],
            params=tuple(ParamSpec.from_json(p) for p in data["params"]),
            out_idx=tuple(data["out_idx"]),
            target=data["target"],
            device_type=data["device_type"],
            config=_config_of(data),
            compile_s=float(data.get("compile_s", 0.0)),
            export_s=float(data.get("export_s", 0.0)),
        )

    def moved_to(self, directory: Path) -> KernelArtifact:
        """The same artifact after its folder was moved or copied to ``directory``."""
        data = self.to_json()
        return KernelArtifact.from_json(data, directory=directory)


_FUNCTIONS = frozenset({"floordiv", "floormod"})  # names in a shape that are not variables

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def evaluate_dim(expr: str, bindings: dict[str, int]) -> int:
    """Evaluate a symbolic extent such as ``"n * 2"`` with the bound size variables."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in bindings:
                raise KeyError(node.id)
            return bindings[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 2:
            fn = {"floordiv": operator.floordiv, "floormod": operator.mod}.get(node.func.id)
            if fn is not None:
                return fn(walk(node.args[0]), walk(node.args[1]))
        raise ValueError(f"unsupported shape expression {expr!r}")

    return walk(ast.parse(expr, mode="eval"))


_CONFIG_LITERAL = "config_literal"  # the config as a Python literal, where JSON loses its tuples


def _json_copy(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=repr))


def _config_of(data: dict[str, Any]) -> dict[str, Any]:
    """A kernel record's config, with the user's tuples: its literal where that is the same
    config as JSON sees it (nothing is run: a literal only), else the JSON config."""
    config = dict(data.get("config", {}))
    literal = data.get(_CONFIG_LITERAL)
    if not isinstance(literal, str):
        return config
    try:
        value = ast.literal_eval(literal)
        same = isinstance(value, dict) and _json_copy(value) == config
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return config
    return dict(value) if same else config
