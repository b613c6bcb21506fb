"""The verdict on one config's outputs: which check applies, and what the kernel left unwritten.

The outputs are compared with the reference config's, or ``ref_prog``'s, or judged by a
``ref_prog`` that takes the results or by ``manual_check_prog``; a config may not write into an
input the reference config leaves unchanged, and elements no check would catch (never written)
fail it whatever the tolerances.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from tileauto.run.session import RunSession
from tileauto.run.validate import (
    Verdict,
    as_list,
    check_bool,
    compare,
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
            bad = ", ".join(repr(spec.params[session.in_pos[k]].name) for k in extra)
            return Verdict(
                False, f"writes into input {bad}, which the reference config leaves unchanged"
            )
    expected: Any = None
    checked: Verdict | None = None  # the verdict of a ref_prog that checks (takes the results)
    if spec.profile.ref_prog is not None:
        if session.ref_checker:
            try:
                value = spec.profile.ref_prog(*clones(session.inputs), *results)
            except Exception as exc:  # noqa: BLE001
                checked = Verdict(False, f"ref_prog raised {type(exc).__name__}: {exc}")
            else:
                checked = check_bool(value, "ref_prog")
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
    if spec.profile.manual_check_prog is not None:
        if expected_list is None and not session.ref_checker:
            return Verdict(True, note=NO_REFERENCE_FOR_MANUAL)
        return manual_check(spec.profile.manual_check_prog, results, expected_list)
    if expected is None or session.ref_checker:
        return Verdict(True)
    counted = _count_mismatch(session, names, mutated, len(as_list(expected)))
    if counted is not None:
        return counted
    with own_work(spec.device):
        return compare(
            results,
            expected,
            rtol=spec.profile.rtol,
            atol=spec.profile.atol,
            max_mismatched_ratio=spec.profile.max_mismatched_ratio,
            names=names,
        )


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
    results, saying what the results were: written inputs are found by comparing values, and
    an update that leaves the test data unchanged is not found (None when the counts agree)."""
    if n_expected == len(names):
        return None
    spec = session.spec
    inplace = session.inplace if session.inplace is not None else mutated
    n_out = len(names) - len(inplace)
    outputs = ", ".join(names[:n_out]) or "none"
    written = ", ".join(names[n_out:]) or "none"
    message = (
        f"reference gave {n_expected} tensors, the kernel {len(names)} results (outputs: "
        f"{outputs}; written inputs: {written})"
    )
    if spec.inplace_args is None and session.inplace is None:
        tensors = [
            k
            for k, p in enumerate(session.in_pos)
            if not spec.params[p].scalar and k not in inplace
        ]
        if tensors:
            listed = ", ".join(f"{k}: {spec.params[session.in_pos[k]].name}" for k in tensors)
            message += (
                "; written inputs are found by comparing each input before and after the run, "
                "so one whose values the kernel leaves unchanged on these inputs is not found: "
                f"declare the inputs the kernel writes with inplace_args=[...] (input positions: "
                f"{listed})"
            )
    return Verdict(False, message)


def single_element(results: Sequence[Any]) -> bool:
    """Whether the results are one tensor of one element (a flag, a count): a bool from
    ``ref_prog(*inputs)`` is then its expected value; otherwise it can only be a verdict
    given without seeing the outputs."""
    return len(results) == 1 and isinstance(results[0], torch.Tensor) and results[0].numel() == 1


def first_unwritten(names: list[str], results: list, expected_list: list | None) -> Verdict | None:
    """The verdict on the first result with elements the kernel never wrote (None if none)."""
    for k, (name, r) in enumerate(zip(names, results)):
        want = expected_list[k] if expected_list is not None and k < len(expected_list) else None
        if want is not None and not isinstance(want, torch.Tensor):
            want = as_tensor(want)  # a number or an array, as compare() takes them
        if not isinstance(want, torch.Tensor) or want.numel() != r.numel():
            want = None  # compare() reports a reference of another size
        else:
            want = want.reshape(r.shape).to(r.device)
        missing = unwritten(name, r, want)
        if missing is not None:
            return missing
    return None


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
