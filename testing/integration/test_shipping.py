"""save_to_disk publishes a complete folder or nothing; load_from_disk never kills its caller.

Real LLVM kernels (``tune_kernels.scale_jit``) tuned, saved and damaged on disk.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tune_kernels import scale_jit

import tileauto
from tileauto.artifact import KernelArtifact
from tileauto.cache import disk

pytestmark = [pytest.mark.slow]


def _tune_small():
    return (
        tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}, {"vec": 8}])
        .set_profile_args(warmup=0, rep=2)
        .run(verbose=False)
    )


def _reseal(path: Path) -> None:
    """Re-hash an edited folder (as if it had been written that way elsewhere)."""
    meta = {k: v for k, v in disk.read_manifest(path).items() if k != "files"}
    disk.seal(path, meta, shared=True)


def _check(result) -> None:
    a = torch.randn(256)
    torch.testing.assert_close(result.kernel(a), a * 2)


# -- save_to_disk: a complete folder or nothing ---------------------------------------------------
@pytest.mark.parametrize(
    "gone", [KernelArtifact.KERNEL_SOURCE, KernelArtifact.HOST_SOURCE, KernelArtifact.SCRIPT]
)
def test_save_recompiles_a_kernel_whose_sources_are_gone(tmp_path, gone):
    _tune_small()
    hit = _tune_small()
    assert hit.cache_hit
    (hit.kernel.artifact.directory / gone).unlink()  # a cached kernel missing one source
    saved = hit.save_to_disk(tmp_path / "saved")
    assert (saved / "kernel" / gone).is_file()
    back = tileauto.AutotuneResult.load_from_disk(saved)
    assert back.config == hit.config
    assert back.kernel.get_kernel_source() and back.kernel.get_host_source()
    assert back.kernel.get_script()
    _check(back)


def test_save_raises_and_publishes_nothing_when_a_source_cannot_be_had(tmp_path):
    first = _tune_small().save_to_disk(tmp_path / "first")
    loaded = tileauto.AutotuneResult.load_from_disk(first)
    (first / "kernel" / KernelArtifact.KERNEL_SOURCE).unlink()  # and a loaded result has no factory
    with pytest.raises(tileauto.CacheError) as info:
        loaded.save_to_disk(tmp_path / "second")
    message = str(info.value)
    assert "second" in message and KernelArtifact.KERNEL_SOURCE in message
    assert "cannot compile it again" in message
    assert not (tmp_path / "second").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".second")]
