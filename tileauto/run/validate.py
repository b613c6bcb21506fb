"""Decide whether a config's results match the reference (rtol, atol, mismatched ratio)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Verdict:
    """The outcome of a comparison: ok, and if not, a message with the worst error."""

    ok: bool
    message: str = ""


def as_list(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


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

    Outputs are filled with NaN before the kernel runs, so a NaN result where the reference is
    finite is work the kernel never did: that fails whatever the tolerances (they are for
    rounding, not for missing elements). Otherwise an element mismatches when
    ``|r - e| > atol + rtol * |e|``, or when the reference is NaN and the result is not; the
    check fails when more than ``max_mismatched_ratio`` of a result's elements mismatch.
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
    """A failing verdict when ``got`` holds NaN the kernel never overwrote, else None.

    With a reference, only NaN where the reference is not NaN counts (a reference may compute
    NaN itself); without one, every NaN does.
    """
    if not got.is_floating_point() and not got.is_complex():
        return None
    missing = torch.isnan(got)
    if want is not None and (want.is_floating_point() or want.is_complex()):
        missing &= ~torch.isnan(want)
    n = int(missing.sum())
    if n == 0:
        return None
    first = int(missing.flatten().nonzero()[0])
    return Verdict(
        False,
        f"unwritten output: {n} elements of {name} (of {got.numel()}; first at flat index "
        f"{first}): the kernel left them as filled before the run",
    )


def _compare_one(
    name: str, got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float, ratio: float
) -> Verdict:
    missing = unwritten(name, got, want)
    if missing is not None:
        return missing
    g = got.detach().to(torch.float64)
    w = want.detach().to(torch.float64)
    g_nan, w_nan = torch.isnan(g), torch.isnan(w)
    diff = (g - w).abs()
    bad = (diff > atol + rtol * w.abs()) | (g_nan != w_nan)
    bad |= (torch.isinf(g) | torch.isinf(w)) & (g != w)  # inf bounds would accept anything
    bad &= ~(g_nan & w_nan)
    n_bad = int(bad.sum())
    total = max(1, g.numel())
    if n_bad / total <= ratio:
        return Verdict(True)
    finite = diff[~(g_nan | w_nan)]
    worst = float(finite.max()) if finite.numel() else float("nan")
    idx = int(bad.flatten().nonzero()[0])
    return Verdict(
        False,
        f"{name}: {n_bad}/{total} elements ({100 * n_bad / total:.2f}%) outside rtol={rtol:g}, "
        f"atol={atol:g} (allowed {100 * ratio:g}%); worst abs error {worst:.4g}; "
        f"first at flat index {idx}: got {float(g.flatten()[idx]):.6g}, expected {float(w.flatten()[idx]):.6g}",
    )


def check_bool(value: Any) -> Verdict | None:
    """ref_prog may return a bool: True passes, False fails. None when it returned tensors."""
    if isinstance(value, bool):
        return Verdict(value, "" if value else "ref_prog returned False")
    return None
