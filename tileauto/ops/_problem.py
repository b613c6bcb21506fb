"""An op's problem: how its arguments become the factory's problem, and that problem's signature.

``problem(*args)`` gives the factory's problem arguments (checked against the factory: every
problem argument set, no tunable among them). The signature of a problem (its kernel's
parameters and outputs: what the fake needs) is a kernel's in memory where one was called,
else the factory's default config elaborated once (or, where the default does not build for
the problem, the first config of the space that does). :class:`tileauto.ops.torch_op.TorchOp`
holds one :class:`OpProblem`.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from tileauto.api.decorator import AutoTuneImpl
from tileauto.api.tune import default_of_space
from tileauto.cache.args import bind_arguments, describe_value, freeze
from tileauto.errors import TorchOpError
from tileauto.jit.impl import JITImpl
from tileauto.ops._fake import (
    Signature,
    SignatureMemo,
    check_same_outputs,
    doubled_problem,
    elaborated_signature,
    hint,
    is_symbolic,
    largest_symbolic,
    scalar_symbols,
    specialized,
)
from tileauto.space import ProductSpace, resolve_configs, split_pass_configs

FALLBACK_CONFIGS = 16  # configs of the space the fake tries where the default does not build
# the fake also elaborates the problem at this many times its symbolic sizes: an extent that
# doubles with them must grow as much there (min(n, 16) traced at n = 4 doubles, then stops)
FAR = 1024


class NotElaborated(TorchOpError):
    """No config of the factory elaborates for a problem: the fake cannot tell its outputs."""


class OpProblem:
    """The problem side of one op: ``problem`` applied and checked, and the signatures.

    ``params`` are the op's parameters (name, kind, default) and ``tensor_pos`` the positions
    of its tensors; ``shapes_given``: the op has ``out_shapes`` (a data-dependent size then
    needs the signature for its dtypes alone).
    """

    def __init__(
        self,
        name: str,
        factory: AutoTuneImpl | JITImpl,
        jit: JITImpl,
        problem: Callable[..., Any],
        params: list[tuple[str, str, Any]],
        tensor_pos: tuple[int, ...],
        shapes_given: bool,
    ) -> None:
        self.name = name
        self.factory = factory
        self.jit = jit
        self.problem = problem
        self.params = params
        self.tensor_pos = tensor_pos
        self.shapes_given = shapes_given
        self.signatures = SignatureMemo(self._elaborate)  # the default config's, elaborated
        self._kernel_signatures: dict[Any, Signature] = {}  # of the kernels in memory

    def value(self, args: tuple) -> Any:
        """``problem(*args)``; what it raises, as a :class:`TorchOpError` naming the op."""
        try:
            return self.problem(*args)
        except Exception as exc:
            raise TorchOpError(
                f"{self.name}: problem{inspect.signature(self.problem)} raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def factory_call(self, value: Any) -> tuple[tuple, dict[str, Any]]:
        """The factory's problem arguments from what ``problem`` returned, checked."""
        pargs: tuple
        pkwargs: dict[str, Any]
        if isinstance(value, dict):
            pargs, pkwargs = (), dict(value)
        elif isinstance(value, (tuple, list)):
            pargs, pkwargs = tuple(value), {}
        else:
            pargs, pkwargs = (value,), {}
        fn = self.jit.factory
        where = f"{getattr(fn, '__name__', 'factory')}{inspect.signature(fn)}"
        try:
            bind_arguments(fn, pargs, pkwargs, partial=True)
        except TypeError as exc:
            raise TorchOpError(
                f"{self.name}: problem returned {value!r}, which does not fit {where} ({exc}): "
                "problem must map the op's arguments to the factory's problem arguments, "
                "e.g. problem=lambda gate, up: gate.shape"
            ) from None
        signature = inspect.signature(fn)
        given = set(signature.bind_partial(*pargs, **pkwargs).arguments)
        names = self.tunable_names()
        if names is None:  # a callable space: its configs for this problem say them
            names = self._names_for(pargs, pkwargs, value, where)
        tunables = given & (names or set())
        if tunables:
            raise TorchOpError(
                f"{self.name}: problem returned {value!r}, which sets the tunable(s) "
                f"{sorted(tunables)} of {where}: tunables are tuned, not given; problem "
                "returns the problem arguments only"
            )
        if names is not None:  # the space is known: what it does not set, problem must
            missing = [
                n
                for n, p in signature.parameters.items()
                if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                and n not in given and n not in names
            ]  # fmt: skip
            if missing:
                raise TorchOpError(
                    f"{self.name}: problem returned {value!r}, which leaves {missing} of {where} "
                    "unset: problem must return every problem argument of the factory"
                )
        return pargs, pkwargs

    def tunable_names(self) -> set[str] | None:
        """The names the space sets (none for ``@jit``); None where a callable space hides them."""
        if not isinstance(self.factory, AutoTuneImpl):
            return set()
        configs = self.factory.configs
        if isinstance(configs, ProductSpace):
            return set(configs.names)
        if isinstance(configs, (list, tuple)):
            return {k for cfg in configs for k in split_pass_configs(cfg)[0]}
        return None  # a callable space: its names are known once it is called

    def _names_for(self, pargs: tuple, pkwargs: dict[str, Any], value: Any, where: str) -> set[str]:
        """The names a callable space sets for this problem (its first configs')."""
        from tileauto.space.resolve import call_configs

        assert isinstance(self.factory, AutoTuneImpl)
        try:
            space = call_configs(self.factory.configs, pargs, pkwargs)  # as given, unfixed
            if isinstance(space, ProductSpace):
                return set(space.names)
            return {
                k
                for cfg in itertools.islice(space, FALLBACK_CONFIGS)
                for k in split_pass_configs(cfg)[0]
            }
        except Exception as exc:
            raise TorchOpError(
                f"{self.name}: problem returned {value!r}, for which the space of {where} "
                f"raised {type(exc).__name__}: {exc}; problem must return every problem "
                "argument of the factory, and no tunable"
            ) from exc

    def signature(
        self, args: tuple, *, elaborated: bool = False
    ) -> tuple[Signature, tuple, dict[str, Any]]:
        """The signature of the problem of ``args``: a kernel's in memory where that is
        enough, else the default config's, elaborated once.

        With symbolic sizes (or ``elaborated``) the default config's is used, as the fake's
        extents are checked against the factory elaborated at other sizes; a kernel in memory
        whose outputs differ from it (a config that pads its output) is an error here, at
        the trace, not a wrong graph later.
        """
        pargs, pkwargs = self._specialized(*self.factory_call(self.value(args)), args)
        try:
            hargs, hkwargs = hint(pargs), hint(pkwargs)
        except TypeError as exc:  # an unbacked (data-dependent) size
            if not self.shapes_given:
                raise TorchOpError(
                    f"{self.name}: {exc}; the fake cannot infer the output shapes: give "
                    "torch_op(..., out_shapes=lambda *args: [shape, ...]) (the dtypes still "
                    "come from the kernel's signature) or fake=..."
                ) from None
            # out_shapes tells the shapes: the signature is needed for its dtypes alone,
            # from the factory elaborated at a stand-in size
            hargs, hkwargs = hint(pargs, stand_in=True), hint(pkwargs, stand_in=True)
            return self.of(hargs, hkwargs), pargs, pkwargs
        key = freeze(describe_value((hargs, hkwargs)))
        known = None if elaborated else self._kernel_signatures.get(key)
        if known is not None and not is_symbolic((pargs, pkwargs)):
            return known, pargs, pkwargs
        sig = self.signatures.get(key, hargs, hkwargs)
        if known is not None:
            check_same_outputs(self.name, known, sig)
        return sig, pargs, pkwargs

    def of(self, pargs: tuple, pkwargs: dict[str, Any]) -> Signature:
        """The default config's signature for the (concrete) problem ``pargs, pkwargs``."""
        return self.signatures.get(freeze(describe_value((pargs, pkwargs))), pargs, pkwargs)

    def doubled(
        self, pargs: tuple, pkwargs: dict[str, Any], only: str | None = None, factor: int = 2
    ) -> Signature | None:
        """The signature at twice the symbolic sizes (``factor`` times; ``only``: the one of
        that name; None: no symbolic size, or a factory that refuses them; then a static
        extent equal to an input's size is taken as it)."""
        if not is_symbolic((pargs, pkwargs)):
            return None
        try:
            return self.of(
                doubled_problem(pargs, only, factor), doubled_problem(pkwargs, only, factor)
            )
        except TorchOpError:
            return None

    def far(self, pargs: tuple, pkwargs: dict[str, Any]) -> tuple[int, Signature] | None:
        """``(factor, the signature at factor times the symbolic sizes)``, the factor
        :data:`FAR` or less where that would pass int32 (None: no symbolic size, or a factory
        that refuses them): the fake's check of extents and dtypes beyond twice the sizes."""
        largest = largest_symbolic((pargs, pkwargs))
        factor = FAR
        while factor > 4 and largest * factor >= 2**31:
            factor //= 2
        if largest * factor >= 2**31 or factor <= 2:
            return None
        sig = self.doubled(pargs, pkwargs, factor=factor)
        return None if sig is None else (factor, sig)

    def remember(self, value: Any, kernel: Any) -> None:
        """A kernel in memory gives its problem's signature: a later fake elaborates nothing.

        After the check against the elaborated one where the op was traced: with configs
        whose outputs differ (a padded output), a kernel's signature is its own config's."""
        pargs, pkwargs = self.factory_call(value)
        key = freeze(describe_value((hint(pargs), hint(pkwargs))))
        sig = Signature(tuple(kernel.params), tuple(kernel.artifact.out_idx))
        self._kernel_signatures.setdefault(key, sig)

    def _elaborate(self, args: tuple, kwargs: dict[str, Any]) -> Signature:
        """The signature of the default config, or where it does not build for this problem
        (``assert n % block == 0``), of the first config of the space that does: every
        config returns the same outputs, and the tuning picks among those that build."""
        fn = self.jit.factory
        first: tuple[dict[str, Any], Exception] | None = None
        # outside torch's modes: a fake is traced under FakeTensorMode, in which a factory's
        # own torch calls (constants it computes with torch.arange) would make fake tensors
        with _no_torch_modes():
            try:
                for config in self._configs_to_elaborate(args, kwargs):
                    try:
                        return elaborated_signature(
                            fn, self.jit.compile_args.out_idx, args, {**kwargs, **config}
                        )
                    except Exception as exc:
                        first = first or (config, exc)
            except Exception as exc:  # the space refuses this problem (a doubled size, say)
                first = first or ({}, exc)
        assert first is not None
        config, error = first
        tuned = self.tunable_names() != set()
        others = f" (nor does the space: its first {FALLBACK_CONFIGS} configs)" if tuned else ""
        raise NotElaborated(
            f"{self.name}: the fake cannot infer the outputs: elaborating "
            f"{getattr(fn, '__name__', 'factory')}(*{args!r}, **{ {**kwargs, **config}!r}) "
            f"raised {type(error).__name__}: {error}{others}; give torch_op(..., "
            "out_shapes=...) or fake=..."
        ) from error

    def _configs_to_elaborate(self, args: tuple, kwargs: dict[str, Any]) -> Iterator[dict]:
        """The default config, then the space's first configs in order (``{}`` for ``@jit``):
        a few, as a problem no config builds (a doubled size the factory refuses) would
        elaborate a large space whole at each trace."""
        if not isinstance(self.factory, AutoTuneImpl):
            yield {}
            return
        fn = self.jit.factory
        space = resolve_configs(self.factory.configs, fn, args, kwargs)
        default = split_pass_configs(default_of_space(fn, space))[0]
        yield default
        for config in itertools.islice(space, FALLBACK_CONFIGS):
            config = split_pass_configs(config)[0]
            if config != default:
                yield config

    def _specialized(
        self, pargs: tuple, pkwargs: dict[str, Any], args: tuple
    ) -> tuple[tuple, dict[str, Any]]:
        """The problem with the symbolic values of the op's scalar arguments guarded to their
        example values (see :func:`tileauto.ops._fake.specialized`): torch traces again for
        another value, as the factory may return another kernel for it."""
        scalars = [i for i in range(len(args)) if i not in self.tensor_pos]
        symbols = scalar_symbols([args[i] for i in scalars])
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

        try:
            return specialized(pargs, symbols), specialized(pkwargs, symbols)
        except GuardOnDataDependentSymNode:
            names = [self.params[i][0] for i in scalars]
            raise TorchOpError(
                f"{self.name}: the problem holds a data-dependent value (from .item()) of the "
                f"op's scalar argument(s) {names}, which chooses the kernel: pass a Python "
                "number, or call the op outside the traced region"
            ) from None


def _no_torch_modes() -> Any:
    """A context without torch's dispatch modes (the fake tensor mode, a tracer's proxy mode)."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()
