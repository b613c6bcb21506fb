"""The walk behind a cache key: a value described by everything it reaches, stably.

A :class:`Walker` numbers every object it meets, so a value met again is a reference (cycles
end, and a key holds no ids or addresses); user code counts by its normalized source, its
defaults, closure cells and the globals it reads, installed code by name and distribution
version, data by value, tensors and arrays by layout and a content hash. What cannot be
described raises :class:`UnkeyableError`. :mod:`tileauto.cache.key` builds the keys on it.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import io
import json
import re
import sys
import types
from collections.abc import Iterable
from typing import Any

from tileauto.cache._code import (
    code_fingerprint,
    code_names,
    defaults,
    source_of,
)
from tileauto.cache._imports import imports_described
from tileauto.cache._installed import library_of, module_of, qualname
from tileauto.errors import TileautoError

_MAX_HASHED_BYTES = 256 << 20  # bigger captured arrays count by layout only
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
# Class attributes that are bookkeeping, not behaviour; some are caches that appear later
# (pickle's ``__slotnames__``, ABC's and Protocol's caches), and would make keys unstable.
_CLASS_BOOKKEEPING = frozenset(
    {
        "__dict__",
        "__weakref__",
        "__module__",
        "__doc__",
        "__qualname__",
        "__firstlineno__",
        "__static_attributes__",
        "__slotnames__",
        "_abc_impl",
        "__non_callable_proto_members__",
        "__protocol_attrs__",
    }
)
# Callables implemented in C: they count by name, never by their (absent) code.
_BUILTIN_CALLABLES = (
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
)
# State that changes as it is used (a stream's contents and position, a suspended frame).
_UNKEYABLE = (io.IOBase, types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)

Where = tuple[str, str]  # (what the walk started from: "global", "argument"...; dotted path)


class UnkeyableError(TileautoError):
    """A value a factory can reach has no stable description: its results are not cached.

    Attributes:
        path: where the value was found, e.g. ``global 'STATE'`` or ``global 'helper.LOCK'``.
        reason: why it cannot be described.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot key {path} ({reason})")
        self.path = path
        self.reason = reason


def is_tensor(value: Any) -> bool:
    """Duck-typed torch tensor check that does not import torch."""
    return type(value).__module__.startswith("torch") and hasattr(value, "data_ptr")


def tensor_layout(value: Any) -> dict[str, Any]:
    """A tensor described by its layout: shape, dtype, strides and device type."""
    return {
        "tensor": list(value.shape),
        "dtype": str(value.dtype).replace("torch.", ""),
        "stride": list(value.stride()),
        "device": value.device.type,
    }


def factory_of(value: Any) -> Any:
    """The factory of a ``@jit`` (``.factory``) or ``@autotune`` (``.jit_impl``) wrapper."""
    if not callable(value) or isinstance(value, type):
        return None
    inner = getattr(value, "jit_impl", value)
    factory = getattr(inner, "factory", None)
    return factory if callable(factory) else None


def _is_atom(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _at(where: Where, kind: str, name: str) -> Where:
    """The place of a value found as ``name`` under ``where``: ``helper.STATE``, ``W[0]``."""
    start, dotted = where
    if not dotted:
        return start or kind, name
    return start, f"{dotted}{'' if name.startswith('[') else '.'}{name}"


def _render(where: Where) -> str:
    start, dotted = where
    return f"{start or 'value'} '{dotted}'" if dotted else start or "the value itself"


# -- the walk -----------------------------------------------------------------------------------
class Walker:
    """One key's walk over everything a value reaches.

    Every non-scalar object met gets a number in meeting order (deterministic: names, keys and
    set items are visited sorted); meeting it again is ``{"ref": number}``, which ends cycles.
    A user module counts by the names read from it, so it is numbered per set of names.
    """

    def __init__(self, content: bool = True) -> None:
        self.content = content
        self.seen: dict[tuple[int, frozenset[str] | None], int] = {}
        self.alive: list[Any] = []  # keeps every walked object alive, so no id is reused

    def walk(self, value: Any, where: Where, names: frozenset[str] = frozenset()) -> Any:
        try:
            return self.describe(value, where, names)
        except RecursionError:
            raise UnkeyableError(_render(where), "nested too deeply to describe") from None

    def fork(self) -> Walker:
        other = Walker(self.content)
        other.seen, other.alive = dict(self.seen), list(self.alive)
        return other

    def describe(self, value: Any, where: Where, names: frozenset[str] = frozenset()) -> Any:
        if _is_atom(value):
            return value
        mark = (id(value), names if isinstance(value, types.ModuleType) else None)
        if mark in self.seen:
            return {"ref": self.seen[mark]}
        self.seen[mark] = len(self.seen)
        self.alive.append(value)
        return self._describe_new(value, where, names)

    def _describe_new(self, value: Any, where: Where, names: frozenset[str]) -> Any:
        if isinstance(value, types.ModuleType):
            return self._module(value, where, names)
        if isinstance(value, type):
            return self._class(value, where, names)
        if is_tensor(value) or _is_ndarray(value):
            return self._array(value)
        if type(value) is list:
            return self._items(value, where, names)
        if type(value) is tuple:
            return {"tuple": self._items(value, where, names)}
        if type(value) in (dict, types.MappingProxyType):
            return {"dict": self._mapping(value, where, names)}
        if type(value) in (set, frozenset):
            return {"set": self._unordered(value, where, names)}
        if isinstance(value, bytes):
            return {"bytes": hashlib.sha256(value).hexdigest()}
        if isinstance(value, enum.Enum):
            return {
                "enum": self.describe(type(value), _at(where, "", "__class__"), names),
                "name": value.name,
                "value": self.describe(value.value, _at(where, "", "value"), names),
            }
        factory = factory_of(value)
        if factory is not None:
            return {"factory": self.describe(factory, where, names)}
        if isinstance(value, types.FunctionType):
            return self._function(value, where, names)
        return self._callable_or_object(value, where, names)

    def _callable_or_object(self, value: Any, where: Where, names: frozenset[str]) -> Any:
        if isinstance(value, functools.partial):
            return {
                "partial": self.describe(value.func, where, names),
                "args": self._items(value.args, where, names),
                "kwargs": self._mapping(value.keywords, where, names),
            }
        if isinstance(value, types.MethodType):
            return {
                "method": self.describe(value.__func__, where, names),
                "self": self.describe(value.__self__, _at(where, "", "__self__"), names),
            }
        if isinstance(value, (staticmethod, classmethod)):
            return {type(value).__name__: self.describe(value.__func__, where, names)}
        if isinstance(value, property):
            parts = (value.fget, value.fset, value.fdel)
            return {"property": [self.describe(f, where, names) for f in parts]}
        if isinstance(value, functools.cached_property):  # its lock is not behaviour
            return {"cached_property": self.describe(value.func, where, names)}
        if isinstance(value, _BUILTIN_CALLABLES):
            out: dict[str, Any] = {"fn": qualname(value), "lib": library_of(module_of(value))}
            owner = getattr(value, "__self__", None)
            if owner is not None and not isinstance(owner, (types.ModuleType, type)):
                out["self"] = self.describe(owner, _at(where, "", "__self__"), names)
            return out
        if isinstance(value, types.CodeType):
            return {"code": code_fingerprint(value)}
        library = library_of(getattr(value, "__module__", None))
        if callable(value) and isinstance(getattr(value, "__qualname__", None), str) and library:
            return self._library_function(value, library, where, names)
        return self._object(value, where, names)

    # -- code -----------------------------------------------------------------------------------
    def _function(self, fn: types.FunctionType, where: Where, names: frozenset[str]) -> Any:
        # The module the code runs in, which functools.wraps does not overwrite as __module__
        library = library_of(fn.__globals__.get("__name__"))
        if library is not None:
            return self._library_function(fn, library, where, names)
        code = fn.__code__
        reads = code_names(code)
        space = fn.__globals__
        out: dict[str, Any] = {"source": source_of(fn)}
        out["globals"] = {
            name: self.describe(space[name], _at(where, "global", name), reads)
            for name in sorted(reads)
            if name in space
        }
        cells: dict[str, Any] = {}
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:  # not assigned yet
                cells[name] = {"empty": True}
                continue
            cells[name] = self.describe(contents, _at(where, "closure cell", name), reads)
        out["closure"] = cells
        out["defaults"] = [
            [name, self.describe(v, _at(where, "default argument", name), reads)]
            for name, v in defaults(fn)
        ]
        # modules the code imports itself (``from helpers import body`` in its body): not
        # globals, so only the import says which code runs (only where there is one: the
        # keys of code without such imports stay as they were)
        imports = imports_described(code, fn.__globals__.get("__package__"))
        if imports:
            out["imports"] = imports
        return out

    def _library_function(self, fn: Any, library: str, where: Where, names: frozenset[str]) -> Any:
        out: dict[str, Any] = {"fn": qualname(fn), "lib": library}
        wrapped = getattr(fn, "__wrapped__", None)  # a library decorator around user code
        if wrapped is not None:
            out["wrapped"] = self.describe(wrapped, where, names)
        elif isinstance(fn, types.FunctionType) and fn.__closure__:
            held = self._held_user_code(fn, where, names)
            if held:  # only then: the keys of library functions without user code stay
                out["holds"] = held
        return out

    def _held_user_code(self, fn: types.FunctionType, where: Where, names: frozenset[str]) -> Any:
        """The user code in a library function's closure cells, by cell name: a decorator that
        keeps no ``__wrapped__`` (TVM's ``T.macro`` and ``T.inline`` return a closure over a
        ``TIRMacro`` / ``TIRInline`` whose ``func`` is the user's function, and ``hygienic``
        how its names resolve)."""
        held: dict[str, Any] = {}
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:  # not assigned yet
                continue
            at = _at(where, "closure cell", name)
            if _is_user_function(contents) or (
                isinstance(contents, functools.partial) and _is_user_function(contents.func)
            ):
                held[name] = self.describe(contents, at, names)
                continue
            if isinstance(contents, (types.ModuleType, type)):
                continue
            func = _stored_attribute(contents, "func")
            if not _is_user_function(func):
                continue
            described: dict[str, Any] = {"func": self.describe(func, _at(at, "", "func"), names)}
            hygienic = _stored_attribute(contents, "hygienic")
            if isinstance(hygienic, bool):
                described["hygienic"] = hygienic
            held[name] = described
        return held

    def _module(self, module: types.ModuleType, where: Where, names: frozenset[str]) -> Any:
        library = library_of(module.__name__, module)
        if library is not None:
            return {"module": module.__name__, "lib": library}
        space = vars(module)
        # The names the code reads from it; with no code in sight, all of its own names.
        read = names or frozenset(n for n in space if not n.startswith("__"))
        return {
            "user_module": {
                name: self.describe(space[name], _at(where, "global", name), read)
                for name in sorted(read)
                if name in space
            }
        }

    def _class(self, cls: type, where: Where, names: frozenset[str]) -> Any:
        library = library_of(cls.__module__)
        if library is not None:
            return {"type": qualname(cls), "lib": library}
        out: dict[str, Any] = {"class": cls.__qualname__}
        out["bases"] = [self.describe(b, _at(where, "", "__bases__"), names) for b in cls.__bases__]
        if type(cls) is not type:
            out["metaclass"] = self.describe(type(cls), _at(where, "", "__class__"), names)
        space = vars(cls)
        out["attrs"] = {
            name: self.describe(space[name], _at(where, "", name), names)
            for name in sorted(space)
            if name not in _CLASS_BOOKKEEPING
        }
        return out

    # -- data -----------------------------------------------------------------------------------
    def _array(self, value: Any) -> Any:
        if is_tensor(value):
            layout = tensor_layout(value)
        else:
            layout = {"ndarray": list(value.shape), "dtype": str(value.dtype)}
        return _array_fingerprint(value, layout) if self.content else layout

    def _items(self, values: Iterable[Any], where: Where, names: frozenset[str]) -> list[Any]:
        return [self.describe(v, _at(where, "", f"[{i}]"), names) for i, v in enumerate(values)]

    def _mapping(
        self, mapping: Any, where: Where, names: frozenset[str], attributes: bool = False
    ) -> Any:
        items = list(mapping.items())
        if all(isinstance(k, str) for k, _ in items):
            return {
                k: self.describe(v, _at(where, "", k if attributes else f"[{k}]"), names)
                for k, v in sorted(items)
            }
        order = self._order([k for k, _ in items], where, names)
        return [
            [
                self.describe(items[i][0], _at(where, "", "[key]"), names),
                self.describe(items[i][1], _at(where, "", f"[{items[i][0]!r}]"), names),
            ]
            for i in order
        ]

    def _unordered(self, values: Iterable[Any], where: Where, names: frozenset[str]) -> list[Any]:
        items = list(values)
        return [
            self.describe(items[i], _at(where, "", "[item]"), names)
            for i in self._order(items, where, names)
        ]

    def _order(self, items: list[Any], where: Where, names: frozenset[str]) -> list[int]:
        """Indices of ``items`` sorted by their description (a trial walk), not by hash."""
        texts = []
        for item in items:
            trial = item if _is_atom(item) else self.fork().describe(item, where, names)
            texts.append(json.dumps([type(item).__name__, trial], sort_keys=True, default=repr))
        return sorted(range(len(items)), key=lambda i: texts[i])

    def _object(self, value: Any, where: Where, names: frozenset[str]) -> Any:
        kind = type(value)
        if isinstance(value, _UNKEYABLE):
            reason = "an I/O stream or a generator, whose state changes as it is used"
            raise UnkeyableError(_render(where), f"object of type {qualname(kind)}: {reason}")
        out: dict[str, Any] = {"object": self.describe(kind, _at(where, "", "__class__"), names)}
        if isinstance(value, (list, tuple)):
            out["items"] = self._items(value, where, names)
        elif isinstance(value, dict):
            out["items"] = self._mapping(value, where, names)
        elif isinstance(value, (set, frozenset)):
            out["items"] = self._unordered(value, where, names)
        if library_of(kind.__module__) is None:  # the user's class: its attributes are its state
            out["state"] = self._mapping(_attributes(value), where, names, attributes=True)
            return out
        wrapped = getattr(value, "__wrapped__", None)
        if wrapped is not None:  # a library decorator's object (lru_cache) around user code
            out["wrapped"] = self.describe(wrapped, _at(where, "", "__wrapped__"), names)
            return out
        try:
            reduced = value.__reduce_ex__(4)  # what pickle saves: the library's own description
        except Exception:  # noqa: BLE001 - not picklable: a C object with hidden state
            reduced = None
        if isinstance(reduced, str):  # a module-level singleton, named
            out["global"] = reduced
            return out
        if isinstance(reduced, tuple) and len(reduced) >= 2:
            parts = list(reduced[:3]) + [
                None if part is None else list(part) for part in reduced[3:5]
            ]
            out["reduce"] = self._items(parts, where, names)
            return out
        torch_object = type(value).__module__.startswith("torch") and not hasattr(value, "__name__")
        text = str(value) if torch_object else repr(value)  # torch.dtype, torch.device
        if not _ADDRESS.search(text):
            out["repr"] = text
            return out
        raise UnkeyableError(
            _render(where), f"object of type {qualname(kind)} without a stable description"
        )


def _is_user_function(value: Any) -> bool:
    """A function whose code is the user's: it runs in a module of no installed library."""
    return isinstance(value, types.FunctionType) and (
        library_of(value.__globals__.get("__name__")) is None
    )


def _stored_attribute(value: Any, name: str) -> Any:
    """An attribute an object holds itself (in its ``__dict__`` or a slot), None where it holds
    none; read without running its code (no ``__getattr__``, no property: a proxy must not
    compute, import or fail while a key is made), and not its class's (a method)."""
    try:
        found = inspect.getattr_static(value, name, None)
        if isinstance(found, types.MemberDescriptorType):  # a slot: its value, if set
            return found.__get__(value, type(value))
        if found is inspect.getattr_static(type(value), name, None):  # the class's, or none
            return None
    except Exception:  # noqa: BLE001 - an unset slot, an object that hides its attributes
        return None
    return found


def _attributes(value: Any) -> dict[str, Any]:
    """An object's ``__dict__`` and the slots it has set, by name."""
    state = dict(getattr(value, "__dict__", None) or {})
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot in ("__dict__", "__weakref__"):
                continue
            name = f"_{cls.__name__.lstrip('_')}{slot}" if slot.startswith("__") else slot
            try:
                state[slot] = getattr(value, name)
            except AttributeError:  # an unset slot
                continue
    return state


def _is_ndarray(value: Any) -> bool:
    return (
        type(value).__module__ == "numpy" and hasattr(value, "tobytes") and hasattr(value, "shape")
    )


def _array_fingerprint(value: Any, layout: Any) -> Any:
    """Layout plus a content hash (arrays a function closes over decide its results)."""
    try:
        if is_tensor(value):
            data = value.detach().cpu().contiguous()
            nbytes = data.numel() * data.element_size()
            if nbytes > _MAX_HASHED_BYTES:
                return layout
            uint8 = sys.modules["torch"].uint8  # a tensor exists, so torch is loaded
            raw = data.view(-1).view(uint8).numpy().tobytes()
        else:
            if value.nbytes > _MAX_HASHED_BYTES:
                return layout
            raw = value.tobytes()
    except Exception:  # noqa: BLE001 - an exotic array: its layout must do
        return layout
    return {"array": layout, "sha256": hashlib.sha256(raw).hexdigest()}
