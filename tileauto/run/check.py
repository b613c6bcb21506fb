"""The verdict on one config's outputs: which check applies, and what the kernel left unwritten.

The outputs are compared with the reference config's, or ``ref_prog``'s, or judged by a
``ref_prog`` that takes the results or by ``manual_check_prog``; whatever the check, a config
may not write into an input the reference leaves out, and elements no check would catch (never
written: an output's still NaN, a written input's still its input value where the reference
changed it) fail it whatever the tolerances.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from tileauto.run.session import RunSession, SessionSpec
from tileauto.run.validate import (
    Verdict,
    as_list,
    check_bool,
    compare,
    unchanged,
    unwritten,
    verdict_value,
)


def check_outputs(
    session: RunSession, ins: list, results: list, names: list[str], mutated: tuple[int, ...]
) -> Verdict:
    spec = session.spec
    if spec.profile.skip_check:
        return Verdict(True)
    if session.inplace is not None and spec.inplace_args is None:
        extra = [k for k in mutated if k not in session.inplace]
        if extra:
            return Verdict(
                False,
                f"writes into input {_input_names(session, extra)}, which the reference config "
                "leaves unchanged",
            )
    expected: Any = None
    checked: Verdict | None = None  # the verdict of a ref_prog that checks (takes the results)
    if spec.profile.ref_prog is not None:
        if session.ref_checker:
            checked = _checker_verdict(session, results, names, mutated)
        else:
            expected = session.expected
            if session.ref_error is not None:
                return Verdict(False, f"no reference: {session.ref_error}")
            if verdict_value(expected) is not None and not single_element(results):
                return Verdict(
                    False,
                    f"ref_prog(*inputs) returned {expected!r}, a bool, without seeing the outputs: "
                    "to check with a bool, make ref_prog take the inputs followed by the results",
                )
            if expected is None:
                return Verdict(False, "ref_prog returned None: return the expected outputs")
    else:
        expected = session.reference
    expected_list = None if expected is None else as_list(expected)
    with own_work(spec.device):
        missing = first_unwritten(names, results, expected_list)
    if missing is not None:  # missing work fails whatever the tolerances or the checker
        return missing
    if checked is not None and not checked.ok:
        return checked
    if expected_list is not None:
        lined_up = _lined_up(session, names, mutated, expected_list)
        if lined_up is not None:
            return lined_up
        with own_work(spec.device):
            stale = first_unchanged(session, results, names, mutated, expected_list)
        if stale is not None:  # as missing work in an output: whatever the tolerances
            return stale
    if spec.profile.manual_check_prog is not None:
        if expected_list is None and not session.ref_checker:
            return Verdict(True, note=NO_REFERENCE_FOR_MANUAL)
        return manual_check(spec.profile.manual_check_prog, results, expected_list)
    if expected is None or session.ref_checker:
        return Verdict(True)
    with own_work(spec.device):
        return compare(
            results,
            expected,
            rtol=spec.profile.rtol,
            atol=spec.profile.atol,
            max_mismatched_ratio=spec.profile.max_mismatched_ratio,
            names=names,
        )


def _lined_up(
    session: RunSession, names: list[str], mutated: tuple[int, ...], expected_list: list
) -> Verdict | None:
    """A failing verdict when the reference's tensors do not line up with the results.

    The comparison needs one tensor per result. A ``manual_check_prog`` pairs them as it
    likes, so with one the counts are held against the results only when the config wrote
    into an input no one declared: a written input the reference leaves out fails whatever
    the check, as without ``manual_check_prog``.
    """
    spec = session.spec
    if spec.profile.manual_check_prog is not None and (
        spec.inplace_args is not None or not mutated
    ):
        return None
    return _count_mismatch(session, names, mutated, len(expected_list))


def checker_results(spec: SessionSpec) -> int:
    """The results a checker ``ref_prog`` takes after the inputs: the outputs and declared
    written inputs, at least one (a kernel without either writes an input, found by value)."""
    return max(1, len(spec.out_pos) + len(spec.inplace_args or ()))


def checker_form(session: RunSession) -> str:
    """What a checker ``ref_prog`` takes, in words: ``3 arguments: the inputs (A, S), then
    the results (B)``."""
    spec = session.spec
    inputs = [spec.params[p].name for p in session.in_pos]
    results = [spec.params[p].name for p in spec.out_pos]
    results += [inputs[k] for k in sorted(spec.inplace_args or ())]
    return (
        f"{len(inputs) + checker_results(spec)} arguments: the inputs "
        f"({', '.join(inputs) or 'none'}), then the results "
        f"({', '.join(results) or 'the one written input'})"
    )


def _checker_verdict(
    session: RunSession, results: list, names: list[str], mutated: tuple[int, ...]
) -> Verdict | None:
    """The verdict of a checker ``ref_prog`` on the results (None: it gave no bool), or why
    it cannot take them: a written input it does not count, rather than its TypeError."""
    spec = session.spec
    prog: Any = spec.profile.ref_prog  # set: a session is a checker's only with one
    n_args = len(session.inputs) + len(results)
    if len(results) != checker_results(spec) and not _accepts(prog, n_args):
        if spec.inplace_args is None and mutated:
            bad = _input_names(session, mutated)
            return Verdict(
                False,
                f"writes into input {bad}, which ref_prog does not take: as a checker it "
                f"takes {checker_form(session)}, and a written input would be one more; if "
                f"the kernel should write {bad}, declare inplace_args={list(mutated)} and "
                "make ref_prog take the new values after the outputs",
            )
        results_are, hint = _results_said(session, names, mutated)
        return Verdict(
            False,
            f"ref_prog cannot take the kernel's {len(names)} results {results_are}: as a "
            f"checker it takes {checker_form(session)}{hint}",
        )
    try:
        value = prog(*clones(session.inputs), *results)
    except Exception as exc:  # noqa: BLE001
        return Verdict(False, f"ref_prog raised {type(exc).__name__}: {exc}")
    return check_bool(value, "ref_prog")


def _accepts(prog: Any, n_args: int) -> bool:
    """Whether ``prog`` can be called with ``n_args`` positional arguments (True when its
    signature cannot be read: the call then says)."""
    try:
        inspect.signature(prog).bind(*range(n_args))
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def _input_names(session: RunSession, positions: Sequence[int]) -> str:
    """``'A'``, or ``'A', 'S'``: the names of the inputs at ``positions``."""
    return ", ".join(repr(session.spec.params[session.in_pos[k]].name) for k in positions)


# Without a ref_prog the default config's results are the reference: none when it failed, or
# when its buffers differ from this config's. manual_check_prog is then not called with None.
NO_REFERENCE_FOR_MANUAL = (
    "manual_check_prog not called: no reference to give it (no ref_prog, and the default "
    "config failed or has other buffers); only checked for unwritten outputs"
)


def manual_check(prog: Any, results: list, expected_list: list | None) -> Verdict:
    """``prog``'s verdict on the results: raising or returning a false bool fails (see
    :func:`~tileauto.run.validate.check_bool`), anything else passes."""
    try:
        # always lists, as TileLang passes them, whatever ref_prog returned
        # copies: a check that works in place on them must not change the next config's
        value = prog(list(results), None if expected_list is None else clones(expected_list))
    except Exception as exc:  # noqa: BLE001
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return Verdict(False, f"manual_check_prog raised {type(exc).__name__}: {first}")
    verdict = check_bool(value, "manual_check_prog")
    return Verdict(True) if verdict is None else verdict


def _count_mismatch(
    session: RunSession, names: list[str], mutated: tuple[int, ...], n_expected: int
) -> Verdict | None:
    """A failing verdict when the reference gives another number of tensors than the kernel's
    results, saying what the results were (None when the counts agree)."""
    if n_expected == len(names):
        return None
    results_are, hint = _results_said(session, names, mutated)
    return Verdict(
        False,
        f"reference gave {n_expected} tensors, the kernel {len(names)} results {results_are}{hint}",
    )


def _results_said(
    session: RunSession, names: list[str], mutated: tuple[int, ...]
) -> tuple[str, str]:
    """What the results are, ``(outputs: B; written inputs: A)``, and, when the written
    inputs were found by comparing values, that an update that leaves the test data
    unchanged is not found and how to declare it ("" otherwise)."""
    spec = session.spec
    inplace = session.inplace if session.inplace is not None else mutated
    n_out = len(names) - len(inplace)
    outputs = ", ".join(names[:n_out]) or "none"
    written = ", ".join(names[n_out:]) or "none"
    results_are = f"(outputs: {outputs}; written inputs: {written})"
    if spec.inplace_args is not None or session.inplace is not None:
        return results_are, ""
    tensors = [
        k for k, p in enumerate(session.in_pos) if not spec.params[p].scalar and k not in inplace
    ]
    if not tensors:
        return results_are, ""
    listed = ", ".join(f"{k}: {spec.params[session.in_pos[k]].name}" for k in tensors)
    return results_are, (
        "; written inputs are found by comparing each input before and after the run, "
        "so one whose values the kernel leaves unchanged on these inputs is not found: "
        f"declare the inputs the kernel writes with inplace_args=[...] (input positions: "
        f"{listed})"
    )


def single_element(results: Sequence[Any]) -> bool:
    """Whether the results are one tensor of one element (a flag, a count): a bool from
    ``ref_prog(*inputs)`` is then its expected value; otherwise it can only be a verdict
    given without seeing the outputs."""
    return len(results) == 1 and isinstance(results[0], torch.Tensor) and results[0].numel() == 1


def first_unwritten(names: list[str], results: list, expected_list: list | None) -> Verdict | None:
    """The verdict on the first result with elements the kernel never wrote (None if none)."""
    for k, (name, r) in enumerate(zip(names, results)):
        want = expected_list[k] if expected_list is not None and k < len(expected_list) else None
        missing = unwritten(name, r, _like(want, r))
        if missing is not None:
            return missing
    return None


def first_unchanged(
    session: RunSession,
    results: list,
    names: list[str],
    mutated: tuple[int, ...],
    expected_list: list,
) -> Verdict | None:
    """The verdict on the first written input holding its input values where the reference
    changed them (see :func:`~tileauto.run.validate.unchanged`); None if none, or when the
    reference does not give one tensor per result."""
    if len(expected_list) != len(results):
        return None
    inplace = session.inplace if session.inplace is not None else mutated
    profile = session.spec.profile
    n_out = len(results) - len(inplace)
    for j, k in enumerate(inplace):
        got = results[n_out + j]
        want = _like(expected_list[n_out + j], got)
        if want is None:
            continue  # compare() reports a reference of another size
        stale = unchanged(
            names[n_out + j], got, want, session.inputs[k], rtol=profile.rtol, atol=profile.atol
        )
        if stale is not None:
            return stale
    return None


def _like(want: Any, got: torch.Tensor) -> torch.Tensor | None:
    """The reference ``want`` as a tensor of ``got``'s shape and device (None when it has no
    tensor of that size: compare() reports it)."""
    if want is not None and not isinstance(want, torch.Tensor):
        want = as_tensor(want)  # a number or an array, as compare() takes them
    if not isinstance(want, torch.Tensor) or want.numel() != got.numel():
        return None
    return want.reshape(got.shape).to(got.device)


@contextlib.contextmanager
def own_work(device: str) -> Iterator[None]:
    """tileauto's own tensor work around a kernel call (copies, canaries, comparisons) on one
    torch thread, whatever the tuning's thread count.

    The work is a few passes over memory; split over torch's OpenMP threads, each operation
    waits at a barrier for every thread, which on a busy machine costs a time slice (see
    docs/performance.md, "run worker"). The user's own programs (``ref_prog``, ``supply_prog``,
    hooks) keep the tuning's threads.
    """
    before = torch.get_num_threads() if device == "cpu" else 1
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def clones(tensors: Sequence[Any]) -> list[Any]:
    return [t.clone() if isinstance(t, torch.Tensor) else t for t in tensors]


def as_tensor(value: Any) -> torch.Tensor | None:
    """``value`` as a tensor, or None when torch cannot make one (compare() then says why)."""
    try:
        return torch.as_tensor(value)
    except Exception:  # noqa: BLE001
        return None
