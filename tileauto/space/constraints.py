"""Constraints: a rule a config must satisfy, parsed from a safe expression or a callable.

The expression language is :mod:`tileauto.space._expression`; this module checks what a rule
may say (names of parameters, constants, arithmetic, comparisons, ``in``, and/or/not).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tileauto.errors import ConfigSpaceError
from tileauto.space._expression import BINARY, COMPARE, PythonError, keep, probe
from tileauto.space._values import array

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from tileauto.space.types import Param


@dataclass(frozen=True)
class Constraint:
    """A rule a config must satisfy: an expression over parameter names, or a callable.

    Attributes:
        name: how the report names it (the expression, or the callable's qualified name).
        source: what was given (the text or the callable).
        expression: the parsed expression (None for a callable).
    """

    name: str
    source: Any
    expression: ast.expr | None
    _results: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, rule: Any, names: Sequence[str]) -> Constraint:
        """Check a rule against the parameter names.

        Raises:
            ConfigSpaceError: a rule that is neither text nor callable, text that is not a
                safe expression, or a name that is not a parameter.
        """
        if isinstance(rule, Constraint):
            rule = rule.source
        if callable(rule):
            return cls(getattr(rule, "__name__", None) or repr(rule), rule, None)
        if not isinstance(rule, str):
            raise ConfigSpaceError(
                f"a constraint is an expression (str) or a callable of a "
                f"config, got {type(rule).__name__}: {rule!r}"
            )
        try:
            tree = ast.parse(rule.strip(), mode="eval").body
        except SyntaxError as exc:
            raise ConfigSpaceError(f"constraint {rule!r} is not an expression: {exc.msg}") from None
        _check_expression(tree, rule, set(names))
        return cls(rule.strip(), rule, tree)

    def check(self, config: dict[str, Any]) -> bool:
        """Whether one config satisfies the rule."""
        if self.expression is None:
            try:
                return bool(self.source(dict(config)))
            except Exception as exc:
                raise ConfigSpaceError(
                    f"constraint {self.name} raised {type(exc).__name__}: {exc} for config "
                    f"{config!r}; a constraint must return True (keep) or False (prune)"
                ) from exc
        columns = {k: array([v]) for k, v in config.items()}
        return bool(self.check_columns(columns, 1)[0])

    def check_columns(self, columns: dict[str, NDArray[Any]], n: int) -> NDArray[Any]:
        """Whether each of ``n`` configs, given as one array per name, satisfies the expression.

        The result is Python's ``bool(expression)`` for each config (exact integers, strings
        compared as Python compares them), except that a config on which Python would raise
        ``ZeroDivisionError`` is pruned, so ``"b != 0 and a % b == 0"`` reads as in Python.

        Raises:
            ConfigSpaceError: Python raises anything else for one of the configs.
        """
        assert self.expression is not None
        try:
            return keep(self.expression, columns, n, self._results)
        except PythonError as exc:
            raise self._refused(exc) from None

    def probe(self, params: Sequence[Param]) -> None:
        """Evaluate the expression on a config of each combination of value types of
        ``params``, so that a type error (``"layout > 1"`` with string layouts) is raised at
        ``product()``, naming the constraint and the config.

        Raises:
            ConfigSpaceError: Python raises, for such a config, anything but ZeroDivisionError.
        """
        if self.expression is None:
            return
        # a value a config does not set reads as None, as in the scan's columns
        groups = [[p.assign(c) or {p.names[0]: None} for c in range(len(p.values))] for p in params]
        try:
            probe(self.expression, groups)
        except PythonError as exc:
            raise self._refused(exc) from None

    def _refused(self, exc: PythonError) -> ConfigSpaceError:
        return ConfigSpaceError(
            f"constraint {self.name!r} cannot be evaluated for {exc.env!r}: Python raises "
            f"{type(exc.error).__name__}: {exc.error}; a constraint must evaluate, as Python "
            'would, for every config of the product (guard it: "b != 0 and a % b == 0"), '
            "or be a callable of the config"
        )


def _check_expression(node: ast.AST, text: str, names: set[str]) -> None:
    """Allow names, constants, arithmetic, comparisons, and/or/not; nothing else."""
    allowed = (
        ast.Name,
        ast.Constant,
        ast.BinOp,
        ast.UnaryOp,
        ast.BoolOp,
        ast.Compare,
        ast.Tuple,
        ast.List,
        ast.Set,
        ast.Load,
        ast.And,
        ast.Or,
        ast.Not,
        ast.USub,
        ast.UAdd,
        ast.In,
        ast.NotIn,
        *BINARY,
        *COMPARE,
    )
    for sub in ast.walk(node):
        if not isinstance(sub, allowed):
            raise ConfigSpaceError(
                f"constraint {text!r} uses {type(sub).__name__}, which a constraint expression "
                "may not: use parameter names, numbers, strings, + - * / // % **, comparisons, "
                "in, and/or/not; pass a callable of the config for anything else"
            )
        if isinstance(sub, ast.Name) and sub.id not in names:
            raise ConfigSpaceError(
                f"constraint {text!r} names {sub.id!r}, which is not a "
                f"parameter; the parameters are {sorted(names)}"
            )
        if isinstance(sub, (ast.Tuple, ast.List, ast.Set)) and not all(
            isinstance(e, ast.Constant) for e in sub.elts
        ):
            raise ConfigSpaceError(f"constraint {text!r}: a list after 'in' holds constants only")
        if isinstance(sub, ast.Compare):
            for op, right in zip(sub.ops, sub.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) != isinstance(
                    right, (ast.Tuple, ast.List, ast.Set)
                ):
                    raise ConfigSpaceError(
                        f"constraint {text!r}: 'in' takes a list of "
                        "constants on its right, and only 'in' does"
                    )
