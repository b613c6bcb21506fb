"""``tileauto.torch_op``: a tuned kernel factory as a ``torch.library`` custom operator.

The op is opaque to ``torch.compile`` (dynamo sees a node of the graph, never the JIT's cold
path), its fake comes from the kernel's signature (:mod:`tileauto.ops._fake`), and its schema
holds the op's own arguments only: the problem function's parameters, never the tunables. A
call maps its arguments to the factory's problem (``problem=``), takes the kernel for that
problem and device from the op's memory, or asks the factory for it once (which tunes, or
loads the tuned kernel from the cache, exactly as calling the factory does).
"""

from __future__ import annotations

import contextlib
import inspect
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tileauto.api.decorator import AutoTuneImpl
from tileauto.cache.args import describe_value, freeze
from tileauto.errors import InputSupplyError, KernelArgumentError, TorchOpError
from tileauto.jit.impl import JITImpl
from tileauto.ops._fake import (
    Signature,
    check_same_dtypes,
    hint,
    output_dtypes,
    output_shapes,
    problem_values,
    shapes_of,
)
from tileauto.ops._problem import NotElaborated, OpProblem
from tileauto.ops._schema import checked_mutates, op_params, registered, schema_text
from tileauto.run.inputs import captured_inputs, inputs_of_this_thread

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*$")


class TorchOp:
    """A tuned kernel as the custom op ``torch.ops.<namespace>.<name>``: call it like a function.

    Made by :func:`torch_op`. ``op(*args)`` calls the registered operator (so autograd,
    ``torch.compile`` and ``torch.export`` see the op); :attr:`default` is its
    ``OpOverload``.
    """

    def __init__(
        self,
        name: str,
        factory: Any,
        problem: Callable[..., Any],
        mutates_args: Sequence[str],
        out_shapes: Callable[..., Any] | None,
        fake: Callable[..., Any] | None,
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise TorchOpError(
                f"name must be 'namespace::op_name' (identifiers), e.g. 'mylib::swiglu'; got {name!r}"
            )
        _check_name(name)
        if isinstance(factory, AutoTuneImpl):
            self._jit: JITImpl = factory.jit_impl
        elif isinstance(factory, JITImpl):
            self._jit = factory
        else:
            raise TypeError(
                "factory must be a @tileauto.autotune or @tileauto.jit kernel factory, got "
                f"{type(factory).__name__}: decorate the function with @tileauto.jit(out_idx=...)"
            )
        if not callable(problem):
            raise TypeError(
                "problem must be a callable of the op's arguments returning the factory's problem "
                f"arguments (e.g. problem=lambda gate, up: gate.shape), got {type(problem).__name__}"
            )
        for what, value in (("out_shapes", out_shapes), ("fake", fake)):
            if value is not None and not callable(value):
                raise TypeError(f"{what} must be None or a callable, got {type(value).__name__}")
        self.name = name
        self.factory = factory
        self._problem_fn = problem  # read-only: the ``problem`` property, OpProblem's
        self._params = op_params(problem)
        self._num_params = len(self._params)
        self._tensor_pos = tuple(
            i for i, (_, kind, _) in enumerate(self._params) if kind == "Tensor"
        )
        if not self._tensor_pos:
            raise TorchOpError(
                f"{name}: the op takes no tensor (problem's parameters {self.arg_names} are all "
                "scalars): an op's arguments are its tensors, and problem maps them to the factory"
            )
        self.mutates_args = checked_mutates(name, mutates_args, self._params)
        out_idx = self._jit.compile_args.out_idx
        self.num_outputs = len(out_idx) if out_idx is not None else 0
        if self.num_outputs == 0 and not self.mutates_args:
            raise TorchOpError(
                f"{name}: the kernel returns nothing (@jit without out_idx) and mutates_args is "
                "empty: an op must return outputs or write inputs; give @jit(out_idx=[...]) or "
                "mutates_args=[names of the inputs it writes]"
            )
        if registered(name):
            raise TorchOpError(
                f"{name} is already registered with torch (by another torch_op or "
                "torch.library call in this process): choose another name"
            )
        self.out_shapes = out_shapes
        self.schema = schema_text(self._params, self.mutates_args, self.num_outputs)
        self._memo: dict[Any, tuple[Any, tuple[int, ...] | None]] = {}
        self._frozen: dict[Any, tuple[Any, tuple[int, ...] | None]] = {}
        # a dict problem (the documented form) by its items, for the hot path: its frozen
        # description, the key of _frozen, costs tens of microseconds a call
        self._by_items: dict[Any, tuple[Any, tuple[int, ...] | None]] = {}
        self._lock = threading.RLock()
        self._problem = OpProblem(
            name,
            factory,
            self._jit,
            problem,
            self._params,
            self._tensor_pos,
            out_shapes is not None,
        )
        self._traced = False  # a fake ran: real outputs are checked against it from now on
        self._checked_writes: set[Any] = set()
        try:
            self._custom = torch.library.custom_op(
                name, self._run, mutates_args=self.mutates_args, schema=self.schema
            )
            self._custom.register_fake(fake if fake is not None else self._fake)
            if not self.mutates_args:  # torch takes no autograd formula for a mutating op
                self._custom.register_autograd(self._no_backward)
        except Exception as exc:
            _unregister(name)  # a refused op must leave its name free to retry
            raise TorchOpError(
                f"{name}: torch refused to register the op ({type(exc).__name__}: {exc}); "
                "choose another name"
            ) from exc
        self.default = self._custom._opoverload
        self.__name__ = name.split("::")[1]

    @property
    def arg_names(self) -> list[str]:
        return [n for n, _, _ in self._params]

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:  # an op argument may be "self"
        return self.default(*args, **kwargs)

    @property
    def problem(self) -> Callable[..., Any]:
        """The function that maps the op's arguments to the factory's problem."""
        return self._problem.problem

    # An op is a registration of the process (torch.ops.<namespace>.<name>): a copy of a model
    # that holds one (copy.deepcopy, an EMA's AveragedModel) holds the same op.
    def __copy__(self) -> TorchOp:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> TorchOp:
        return self

    def __reduce__(self) -> Any:
        raise TypeError(
            f"the op {self.name} cannot be pickled: it is a registration of this process; "
            "pickle the model's state_dict, and make the op again with tileauto.torch_op(...) "
            "where it is loaded (torch.export's programs refer to it by name)"
        )

    def register_autograd(
        self, backward: Callable[..., Any], *, setup_context: Callable[..., Any] | None = None
    ) -> None:
        """``torch.library.register_autograd`` for this op: ``backward(ctx, *grads)`` returns
        one gradient per op argument (None for those without one)."""
        torch.library.register_autograd(self.name, backward, setup_context=setup_context)

    def _no_backward(self, ctx: Any, *grads: Any) -> Any:
        """The backward of an op registered without one: an error that says what to do."""
        raise TorchOpError(
            f"{self.name}: a backward through the op, which has no autograd formula: register "
            "one, torch_op(..., backward=..., setup_context=...) or op.register_autograd(...). "
            "torch.compile traces the backward with the forward wherever an input requires "
            "grad (the activations of a model's parameters), so it asks for one even if no "
            "backward runs: run inference under torch.no_grad() or torch.inference_mode()"
        )

    def register_fake(self, fake: Callable[..., Any]) -> None:
        """Replace the fake made from the kernel's signature by ``fake(*args)``."""
        self._custom.register_fake(fake)

    def kernels(self) -> dict[Any, Any]:
        """The kernels this op called, by (problem, device): for inspection and tests."""
        return {key: kernel for key, (kernel, _) in {**self._memo, **self._frozen}.items()}

    def __repr__(self) -> str:
        return f"TorchOp({self.name}: {self.schema}, factory={self._jit!r})"

    # -- the real call ----------------------------------------------------------------------
    def _run(self, *args: Any) -> Any:
        # The hot path: one problem call, one dict lookup, the kernel call.
        if len(args) < self._num_params:  # torch drops trailing arguments equal to defaults
            args = self._with_defaults(args)
        try:
            value = self._problem_fn(*args)  # the hot path: no property
        except Exception:
            self._problem.value(args)  # raises it as a TorchOpError naming the op
            raise
        try:
            kernel, positions = self._memo[(value, args[self._tensor_pos[0]].device)]
        except KeyError:
            return self._first_call(args)
        except TypeError:  # unhashable: a dict problem is found by its items
            try:
                items = tuple(value.items()) if type(value) is dict else None
                kernel, positions = self._by_items[(items, args[self._tensor_pos[0]].device)]
            except (KeyError, TypeError):
                return self._first_call(args)
        try:
            if positions is None:
                return kernel(*args)
            return kernel(*[args[i] for i in positions])
        except KernelArgumentError as exc:
            raise self._op_argument_error(exc, positions) from exc

    def _with_defaults(self, args: tuple) -> tuple:
        """``args`` with the defaults of the arguments torch left out (it drops trailing
        arguments equal to their schema default before it calls the op's implementation)."""
        rest = [d for _, _, d in self._params[len(args) :]]
        if any(d is inspect.Parameter.empty for d in rest):
            return args  # not a dropped default: the count's error follows
        return (*args, *rest)

    def _op_argument_error(
        self, exc: KernelArgumentError, positions: tuple[int, ...] | None
    ) -> KernelArgumentError:
        """A kernel's argument error in the op's terms: its argument's name and position."""
        k = getattr(exc, "argument_index", None)
        detail = getattr(exc, "argument_detail", None)
        if k is None or detail is None:
            return exc
        i = k if positions is None else positions[k] if k < len(positions) else None
        if i is None or i >= self._num_params:
            return exc
        return KernelArgumentError(f"{self.name}: argument {i} ({self._params[i][0]!r}: {detail})")

    def _first_call(self, args: tuple) -> Any:
        """A problem this op has not called yet (or an unhashable one): find its kernel."""
        value = self._problem.value(args)
        device = args[self._tensor_pos[0]].device
        key: Any = (value, device)
        memo = self._memo
        if not _exact_key(key, value):  # lists, dicts, a zero or NaN float: its frozen description
            key, memo = (freeze(describe_value(value)), device), self._frozen
        with self._lock:
            entry = memo.get(key)
            new = entry is None
            if entry is None:
                if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                    raise TorchOpError(
                        f"{self.name}: a new problem {value!r} inside a CUDA graph capture: "
                        "tuning cannot run in a capture; call the op once with these shapes "
                        "before capturing (torch.compile(mode='reduce-overhead') warms up first)"
                    )
                pargs, pkwargs = self._problem.factory_call(value)
                try:
                    with self._tuning_inputs(args, pargs, pkwargs):
                        kernel = self.factory(*pargs, **pkwargs)
                except InputSupplyError as exc:
                    raise InputSupplyError(
                        f"{self.name}: tuning the problem {value!r}: {exc}"
                    ) from exc
                entry = (kernel, self._kernel_positions(kernel.num_inputs, args))
            kernel, positions = entry
            kargs = args if positions is None else tuple(args[i] for i in positions)
            try:
                out = self._checked_call(key, kernel, kargs, args)
            except KernelArgumentError as exc:
                raise self._op_argument_error(exc, positions) from exc
            if new:
                if self._traced:
                    self._check_against_fake(args, out)
                self._problem.remember(value, kernel)
                memo[key] = entry
                if type(value) is dict and not _inexact(value):
                    try:
                        self._by_items[(tuple(value.items()), device)] = entry
                    except TypeError:  # a value that is a list: the frozen key alone
                        pass
        return out

    def _tuning_inputs(
        self, args: tuple, pargs: tuple, pkwargs: dict[str, Any]
    ) -> contextlib.AbstractContextManager[None]:
        """The op's own arguments as the tuning's inputs, where the kernel takes what tileauto
        cannot make (a scalar, a tensor of symbolic shape) and no ``set_autotune_inputs``
        block is open: the op holds the very inputs the tuning asks for."""
        if not isinstance(self.factory, AutoTuneImpl) or captured_inputs() is not None:
            return contextlib.nullcontext()
        hargs, hkwargs = hint(pargs), hint(pkwargs)
        try:
            sig = self._problem.of(hargs, hkwargs)
        except TorchOpError:  # no config elaborates: the factory's own error follows
            return contextlib.nullcontext()
        specs = [sig.params[p] for p in sig.in_pos]
        if not any(spec.scalar or spec.static_shape is None for spec in specs):
            return contextlib.nullcontext()  # tileauto makes the inputs, as a direct call does
        positions = self._kernel_positions(len(sig.in_pos), args)
        return inputs_of_this_thread(*(args if positions is None else [args[i] for i in positions]))

    def _checked_call(self, key: Any, kernel: Any, kargs: tuple, args: tuple) -> Any:
        """The first call of a kernel: inputs not in ``mutates_args`` must come back unchanged."""
        if key in self._checked_writes:
            return kernel(*kargs)
        kept = {
            i: args[i].clone()
            for i in self._tensor_pos
            if self._params[i][0] not in self.mutates_args
        }
        out = kernel(*kargs)
        written = [
            self._params[i][0] for i, before in kept.items() if not _same_bytes(before, args[i])
        ]
        if written:
            with torch.no_grad():  # the caller's tensors as they were: the call is refused
                for i, before in kept.items():
                    args[i].copy_(before)
            raise TorchOpError(
                f"{self.name}: the kernel wrote into {written}, which mutates_args does not "
                f"declare ({list(self.mutates_args)}): declare them, torch_op(..., "
                f"mutates_args={[*self.mutates_args, *written]!r}), or the compiled graphs "
                "that use the op will read stale values"
            )
        self._checked_writes.add(key)
        return out

    def _check_against_fake(self, args: tuple, out: Any) -> None:
        """Outputs whose shapes or dtypes differ from the fake's (a config that pads its
        output or returns another dtype, a wrong ``out_shapes``) would make traced graphs
        wrong: said at the first call of a problem. A problem no config elaborates for has no
        fake to compare with (it raises at a trace)."""
        try:
            sig, shapes = self._fake_shapes(args, elaborated=True)
        except NotElaborated:
            return
        expected = [
            (tuple(shape), str(dtype).removeprefix("torch."))
            for shape, dtype in zip(shapes, output_dtypes(sig))
        ]
        got = [(tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in _as_list(out)]
        if got != expected:
            raise TorchOpError(
                f"{self.name}: the kernel returned outputs (shape, dtype) {got} where the op's "
                f"fake says {expected}: the tuned config changes the outputs (they must not "
                "depend on the tunables: return the unpadded result, in the default config's "
                "dtype), or out_shapes is wrong"
            )

    # -- the fake ---------------------------------------------------------------------------
    def _fake(self, *args: Any) -> Any:
        if len(args) < self._num_params:
            args = self._with_defaults(args)
        device = self._one_device(args)
        sig, shapes = self._fake_shapes(args)
        self._traced = True  # after the fake's own errors: a refused trace made no graph
        outs = [
            torch.empty(shape, dtype=dtype, device=device)
            for shape, dtype in zip(shapes, output_dtypes(sig))
        ]
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _one_device(self, args: tuple) -> torch.device:
        """The device of the op's tensors, which must be one (torch calls the fake as the
        Meta kernel when one is a meta tensor: its output would be uninitialized memory)."""
        first = self._tensor_pos[0]
        device = args[first].device
        for i in self._tensor_pos[1:]:
            arg = args[i]
            if isinstance(arg, torch.Tensor) and arg.device != device:
                raise TorchOpError(
                    f"{self.name}: the op's tensors are on different devices: "
                    f"{self._params[first][0]!r} (argument {first}) is on {device} and "
                    f"{self._params[i][0]!r} (argument {i}) on {arg.device}; give every "
                    "tensor on one device"
                )
        return device

    def _fake_shapes(
        self, args: tuple, *, elaborated: bool = False
    ) -> tuple[Signature, list[tuple[Any, ...]]]:
        """The fake's signature and output shapes for ``args``."""
        sig, pargs, pkwargs = self._problem.signature(args, elaborated=elaborated)
        positions = self._kernel_positions(len(sig.in_pos), args)
        kargs = args if positions is None else tuple(args[i] for i in positions)
        names = [
            (i, self._params[i][0]) for i in (range(len(args)) if positions is None else positions)
        ]
        _check_dtypes(self.name, sig, kargs, names)
        if self.out_shapes is not None:
            shapes = shapes_of(self.name, self.out_shapes(*args), self.num_outputs)
        else:
            doubled = self._problem.doubled(pargs, pkwargs)
            check_same_dtypes(self.name, sig, doubled)
            far = self._problem.far(pargs, pkwargs) if doubled is not None else None
            if far is not None:
                check_same_dtypes(self.name, sig, far[1], f"{far[0]} times")
            try:
                shapes = output_shapes(
                    sig,
                    kargs,
                    problem_values(pargs, pkwargs),
                    doubled,
                    lambda symbol: self._problem.doubled(pargs, pkwargs, only=symbol),
                    far,
                )
            except (KeyError, ValueError) as exc:
                raise TorchOpError(
                    f"{self.name}: the fake cannot infer the output shapes from the kernel's "
                    f"signature ({type(exc).__name__}: {exc}); give torch_op(..., "
                    "out_shapes=lambda *args: [shape, ...]) or fake=..."
                ) from None
        return sig, shapes

    def _kernel_positions(self, num_in: int, args: tuple) -> tuple[int, ...] | None:
        """Which op arguments the kernel takes: all of them (None), or the tensors alone."""
        if num_in == len(args):
            return None
        if num_in == len(self._tensor_pos):
            return self._tensor_pos
        raise TorchOpError(
            f"{self.name}: the kernel takes {num_in} input(s) but the op has {len(args)} "
            f"argument(s) ({self.arg_names}), {len(self._tensor_pos)} of them tensors: the "
            "kernel is called with every op argument, or with the tensors alone"
        )


def torch_op(
    name: str,
    factory: Any,
    *,
    problem: Callable[..., Any],
    mutates_args: Sequence[str] = (),
    out_shapes: Callable[..., Any] | None = None,
    fake: Callable[..., Any] | None = None,
    backward: Callable[..., Any] | None = None,
    setup_context: Callable[..., Any] | None = None,
) -> TorchOp:
    """Register a tuned kernel factory as the PyTorch custom op ``name``.

    ``op = tileauto.torch_op("mylib::swiglu", swiglu, problem=lambda gate, up: gate.shape)``
    makes ``torch.ops.mylib.swiglu``; ``op(gate, up)`` returns the kernel's outputs, tuning
    each new problem at its first call (or loading it from the cache) as ``swiglu(M, N)``
    does. The op works under ``torch.compile(fullgraph=True)`` (dynamic shapes included),
    ``torch.export``, autograd (with a backward) and ``torch.no_grad``/``inference_mode``.

    Args:
        name: ``"namespace::op_name"``, not registered yet.
        factory: an ``@autotune`` or ``@jit`` factory; its ``out_idx`` outputs are returned.
        problem: maps the op's arguments to the factory's problem arguments (a tuple, a
            ``torch.Size``, a dict of keyword arguments, or one value). Its parameters are
            the op's: tensors, unless annotated (or defaulted) ``int``, ``float`` or ``bool``.
        mutates_args: names of the op's tensors the kernel writes (checked at each new
            problem's first call: an undeclared write is an error).
        out_shapes: ``out_shapes(*args) -> [shape, ...]`` where the kernel's signature does
            not tell the output shapes (dtypes still come from it).
        fake: a fake implementation of your own, instead of the one from the signature.
        backward / setup_context: registered with ``torch.library.register_autograd``.

    Raises:
        TorchOpError: a bad name, a name already registered, ``mutates_args`` naming no
            tensor of the op, or a kernel that neither returns nor writes anything.
    """
    # checked before the op is registered: a refused call must leave its name free to retry
    if setup_context is not None and backward is None:
        raise TypeError("setup_context is given without backward: give both, or neither")
    for what, fn in (("backward", backward), ("setup_context", setup_context)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{what} must be a function, got {type(fn).__name__}: {fn!r:.60}")
    op = TorchOp(name, factory, problem, mutates_args, out_shapes, fake)
    if backward is not None:
        op.register_autograd(backward, setup_context=setup_context)
    return op


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (NaNs included), as a write check needs."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    # 1-D first: torch views no 0-dim tensor wider than a byte as bytes
    return bool(
        torch.equal(
            a.contiguous().reshape(-1).view(torch.uint8),
            b.contiguous().reshape(-1).view(torch.uint8),
        )
    )


def _check_name(name: str) -> None:
    """Refuse, before anything is registered, a name torch would fail on half-way."""
    namespace, op_name = name.split("::")
    probe = torch._ops._OpNamespace("tileauto_probe")
    if op_name in vars(probe) or hasattr(type(probe), op_name):
        raise TorchOpError(
            f"{name}: the op name {op_name!r} is an attribute of torch's op namespaces "
            f"(torch.ops.{namespace}.{op_name} would not be the op): choose another name"
        )
    ops = torch.ops
    if hasattr(type(ops), namespace) or (
        namespace in vars(ops) and not isinstance(vars(ops)[namespace], torch._ops._OpNamespace)
    ):
        raise TorchOpError(
            f"{name}: the namespace {namespace!r} is an attribute of torch.ops "
            f"(torch.ops.{namespace} would not be the namespace): choose another name"
        )
    try:
        torch._C.parse_schema(f"{name}() -> ()")
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TorchOpError(
            f"{name}: torch's schema parser refuses the name ({first}; a keyword such as "
            "'def' or 'in' cannot name an op or namespace): choose another name"
        ) from None


def _unregister(name: str) -> None:
    """Destroy what a failed ``torch.library.custom_op(name, ...)`` left registered."""
    from torch._library import custom_ops

    lib = custom_ops.OPDEF_TO_LIB.pop(name, None)
    if lib is not None:
        lib._destroy()
    custom_ops.OPDEFS.pop(name, None)


def _exact_key(key: Any, value: Any) -> bool:
    """Whether ``key`` (a problem and a device) finds only its own problem in a dict."""
    try:
        hash(key)
    except TypeError:
        return False
    return not _inexact(value)


def _inexact(value: Any) -> bool:
    """Whether ``value`` holds a float that equality misreads as a key: a zero (-0.0 == 0.0,
    and a factory baking ``1/d`` or ``copysign`` makes two kernels) or a NaN (nan != nan:
    never found again). Such a problem is found by its frozen description, which keeps the
    float's bits (off the hot path's single lookup)."""
    if type(value) is float:
        return value == 0.0 or value != value
    if isinstance(value, (tuple, list)):
        return any(_inexact(v) for v in value)
    if isinstance(value, dict):
        return any(_inexact(v) for v in value.values())
    return False


def _as_list(out: Any) -> list:
    if out is None:
        return []
    return [out] if isinstance(out, torch.Tensor) else list(out)


def _check_dtypes(
    name: str, sig: Signature, kargs: Sequence[Any], names: Sequence[tuple[int, str]]
) -> None:
    """The dtype errors a direct call gives, raised while tracing already (``names``: the
    op's position and name of each kernel argument)."""
    from tileauto.jit.dtypes import torch_dtype

    for k, pos in enumerate(sig.in_pos):
        spec, arg = sig.params[pos], kargs[k]
        if (
            not spec.scalar
            and isinstance(arg, torch.Tensor)
            and arg.dtype != torch_dtype(spec.dtype)
        ):
            i, arg_name = names[k]
            raise KernelArgumentError(
                f"{name}: argument {i} ({arg_name!r}: wrong dtype: expected "
                f"{spec.dtype}, got {str(arg.dtype).replace('torch.', '')})"
            )
