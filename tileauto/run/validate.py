"""Decide whether a config's results match the reference (rtol, atol, mismatched ratio)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Verdict:
    """The outcome of a comparison: ok, and if not, a message with the worst error.

    ``note`` is for a config that passes with something left out (a check that could not run).
    """

    ok: bool
    message: str = ""
    note: str = ""


def as_list(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def fill_value(dtype: torch.dtype) -> Any:
    """The value outputs hold before the kernel runs (run/buffers.py fills them with it), one
    a stray write is unlikely to leave: NaN, True, or the integer extreme away from zero (the
    minimum of a signed type, the maximum of an unsigned one, whose minimum is 0)."""
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return True
    info = torch.iinfo(dtype)
    return info.min if dtype.is_signed else info.max


def compare(
    results: Sequence[torch.Tensor],
    expected: Any,
    *,
    rtol: float,
    atol: float,
    max_mismatched_ratio: float,
    names: Sequence[str] | None = None,
) -> Verdict:
    """Compare the kernel's results with reference tensors.

    Outputs are filled before the kernel runs (see :func:`fill_value`), so a result still
    holding the fill value where the reference does not is work the kernel may never have
    done: that fails whatever the tolerances (they are for rounding, not for missing
    elements). Otherwise an element mismatches when ``|r - e| > atol + rtol * |e|``, or when
    the reference is NaN and the result is not; the check fails when more than
    ``max_mismatched_ratio`` of a result's elements mismatch. Integer and bool results are
    compared as integers (see :func:`_integer_mismatches`).
    """
    expected_list = as_list(expected)
    if len(expected_list) != len(results):
        return Verdict(
            False, f"reference gave {len(expected_list)} tensors, the kernel {len(results)}"
        )
    for k, (got, want) in enumerate(zip(results, expected_list)):
        name = names[k] if names is not None and k < len(names) else f"result {k}"
        if not isinstance(want, torch.Tensor):
            want = torch.as_tensor(want)
        want = want.to(device=got.device)
        if tuple(want.shape) != tuple(got.shape):
            if want.numel() == got.numel():
                want = want.reshape(got.shape)
            else:
                return Verdict(
                    False, f"{name}: shape {list(got.shape)} but reference {list(want.shape)}"
                )
        verdict = _compare_one(name, got, want, rtol, atol, max_mismatched_ratio)
        if not verdict.ok:
            return verdict
    return Verdict(True)


def unwritten(name: str, got: torch.Tensor, want: torch.Tensor | None = None) -> Verdict | None:
    """A failing verdict when ``got`` still holds its fill value where it should not, else None.

    A float result's NaN counts where the reference is not NaN (a reference may compute NaN
    itself), and every NaN without a reference. An integer or bool result's fill value
    (:func:`fill_value`) counts only where a reference differs from it: a kernel may compute
    that value (``True`` most of all), and only the reference tells the two apart. Either way
    the kernel may have computed the value rather than skipped the element, so the message
    says both.
    """
    if got.is_floating_point() or got.is_complex():
        missing = torch.isnan(got)
        if want is not None and (want.is_floating_point() or want.is_complex()):
            missing &= ~torch.isnan(want)
        held = "NaN where the reference is not NaN" if want is not None else "NaN"
        why = "never written, or computed as NaN"
    elif want is None:
        return None
    else:
        fill = fill_value(got.dtype)
        missing = (got == fill) & (want != fill)
        held = f"the fill value {fill} where the reference differs"
        why = "never written, or computed as that value"
    n = int(missing.sum())
    if n == 0:
        return None
    first = int(missing.flatten().nonzero()[0])
    return Verdict(
        False,
        f"unwritten output: {n} elements of {name} (of {got.numel()}; first at flat index "
        f"{first}) hold {held} ({why})",
    )


def unchanged(
    name: str,
    got: torch.Tensor,
    want: torch.Tensor,
    original: torch.Tensor,
    *,
    rtol: float,
    atol: float,
) -> Verdict | None:
    """A failing verdict when a written input ``got`` still holds, bit for bit, its value
    before the run (``original``) where it mismatches the reference ``want``, else None.

    A written input starts as a copy of the input, not filled like an output, so an element
    the kernel skips keeps its old value and would pass as one mismatch among those
    ``max_mismatched_ratio`` forgives: it fails whatever the tolerances, as an unwritten output
    does. A correct kernel is close to the reference, and an element the reference leaves as
    it was is no mismatch, so neither is caught.
    """
    g, w, bad, _, show = _mismatches(got, want, rtol, atol)
    stale = bad & _same_bits(got, original.to(got.device))
    n = int(stale.sum())
    if n == 0:
        return None
    first = int(stale.flatten().nonzero()[0])
    return Verdict(
        False,
        f"unwritten: {n} elements of {name} (of {got.numel()}; first at flat index {first}) "
        "still hold their input values where the reference changed them (there: got "
        f"{show(g.flatten()[first])}, expected {show(w.flatten()[first])}); tolerances and "
        "max_mismatched_ratio do not forgive missing work",
    )


# the integer type of each element size, to compare floats bit for bit (NaN, -0.0)
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Where ``a`` and ``b`` (of one shape and dtype) hold the same bits."""
    if a.is_complex():
        return _same_bits(torch.view_as_real(a), torch.view_as_real(b)).all(dim=-1)
    if a.is_floating_point() and a.dtype == b.dtype and a.element_size() in _BITS:
        bits = _BITS[a.element_size()]
        return a.view(bits) == b.view(bits)
    return a == b


def _compare_one(
    name: str, got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float, ratio: float
) -> Verdict:
    missing = unwritten(name, got, want)
    if missing is not None:
        return missing
    g, w, bad, worst, show = _mismatches(got, want, rtol, atol)
    n_bad = int(bad.sum())
    total = max(1, g.numel())
    if n_bad / total <= ratio:
        return Verdict(True)
    idx = int(bad.flatten().nonzero()[0])
    return Verdict(
        False,
        f"{name}: {n_bad}/{total} elements ({100 * n_bad / total:.2f}%) outside rtol={rtol:g}, "
        f"atol={atol:g} (allowed {100 * ratio:g}%); worst abs error {worst}; "
        f"first at flat index {idx}: got {show(g.flatten()[idx])}, expected {show(w.flatten()[idx])}"
        f"{_reference_unwritten(got, want, bad)}",
    )


def _reference_unwritten(got: torch.Tensor, want: torch.Tensor, bad: torch.Tensor) -> str:
    """What to add when every mismatched element of an integer reference holds the fill value
    (the reference, a default config's output, was likely left unwritten there: an integer
    reference is not checked for it, since a kernel may compute the fill value)."""
    if got.is_floating_point() or got.dtype == torch.bool or want.dtype != got.dtype:
        return ""
    fill = fill_value(got.dtype)
    if not bool((want[bad] == fill).all()):
        return ""
    return (
        f" (every mismatched element of the reference is {fill}, the value outputs hold before "
        "a kernel runs: the reference may have left them unwritten; without a ref_prog the "
        "reference is the default config's output)"
    )


def _mismatches(
    got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str, Any]:
    """Both sides as compared (int64 or float64), where they mismatch, the worst error, and
    how to show a value of them (see :func:`compare` for when an element mismatches)."""
    integers = _as_integers(got, want)
    if integers is not None:
        g, w = integers
        bad, worst = _integer_mismatches(g, w, rtol, atol)
        return g, w, bad, worst, int
    g = got.detach().to(torch.float64)
    w = want.detach().to(torch.float64)
    g_nan, w_nan = torch.isnan(g), torch.isnan(w)
    diff = (g - w).abs()
    bad = (diff > atol + rtol * w.abs()) | (g_nan != w_nan)
    bad |= (torch.isinf(g) | torch.isinf(w)) & (g != w)  # inf bounds would accept anything
    bad &= ~(g_nan & w_nan)
    finite = diff[~(g_nan | w_nan)]
    worst = f"{float(finite.max()):.4g}" if finite.numel() else "nan"
    return g, w, bad, worst, _six_digits


def _six_digits(value: torch.Tensor) -> str:
    return f"{float(value):.6g}"


def _as_integers(got: torch.Tensor, want: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Both sides as int64 when the result is an integer or bool tensor and the reference
    holds whole numbers, else None (then compared in float64).

    float64 keeps 53 bits: int64 values past 2**53 would round there, and 2**60 + 8 would
    equal 2**60 + 1 whatever the tolerances.
    """
    if got.is_floating_point() or got.is_complex() or want.is_complex():
        return None
    if want.is_floating_point():
        w = want.detach().to(torch.float64)
        whole = torch.isfinite(w) & (w == w.round()) & (w.abs() < 2.0**63)
        if not bool(whole.all()):
            return None
        return got.detach().to(torch.int64), w.to(torch.int64)
    return got.detach().to(torch.int64), want.detach().to(torch.int64)


def _integer_mismatches(
    g: torch.Tensor, w: torch.Tensor, rtol: float, atol: float
) -> tuple[torch.Tensor, str]:
    """Where ``|g - w| > atol + rtol * |w|``, with the difference exact, and the worst one.

    The difference is taken in int64; one of 2**61 or more (which int64 might overflow) is
    taken in float64, whose rounding there is far below the difference itself. For an
    integer difference, ``d > bound`` is ``d > floor(bound)``, an exact integer comparison.
    """
    approx = (g.to(torch.float64) - w.to(torch.float64)).abs()
    bound = atol + rtol * w.to(torch.float64).abs()
    huge = approx >= 2.0**61
    diff = torch.where(huge, 0, g - w).abs()  # exact: below 2**62, no overflow
    limit = bound.floor().clamp(max=2.0**62).to(torch.int64)
    bad = torch.where(huge, approx > bound, diff > limit)
    if not diff.numel():
        return bad, "0"
    if bool(huge.any()):
        return bad, f"{float(approx.max()):.4g}"
    return bad, str(int(diff.max()))


def verdict_value(value: Any) -> bool | None:
    """``value`` as a check's answer: a Python or numpy bool, or a one-element bool tensor or
    array (what ``(a == b).all()`` and ``np.all`` return); None for anything else.

    ``tensor(False)`` is not ``False``: judging by type alone let such answers pass.
    """
    if isinstance(value, bool):
        return value
    if _bool_elements(value) == 1:
        return bool(value)
    return None


def _bool_elements(value: Any) -> int | None:
    """The element count of a torch or numpy bool tensor, array or scalar, else None."""
    if isinstance(value, torch.Tensor):
        return value.numel() if value.dtype == torch.bool else None
    if type(value).__module__ == "numpy" and str(getattr(value, "dtype", "")) == "bool":
        return int(value.size)
    return None


def check_bool(value: Any, who: str = "ref_prog") -> Verdict | None:
    """The verdict a check (``who``) returned: a bool (see :func:`verdict_value`) passes when
    true. None when it returned something else (None, tensors: it raises to fail).

    A bool tensor of several elements is an element-wise answer, not one verdict: it fails,
    naming what came, rather than pass whatever its elements say.
    """
    answer = verdict_value(value)
    if answer is not None:
        return Verdict(answer, "" if answer else f"{who} returned {value!r}")
    n = _bool_elements(value)
    if n is not None:
        return Verdict(
            False,
            f"{who} returned a bool tensor of {n} elements, expected one bool: reduce it "
            "(e.g. bool((a == b).all()))",
        )
    return None
