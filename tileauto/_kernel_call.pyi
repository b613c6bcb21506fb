# Types of the extension module built from src/kernel_call.c.
from collections.abc import Callable
from typing import Any

class KernelCall:
    """A callable whose call goes to a fast callable where it applies, else to the Python
    method ``_call_python``."""

    def __call__(self, *args: Any) -> Any: ...
    def _set_fast_call(
        self,
        fast: Callable[..., Any] | None,
        nargs: int = 0,
        errors: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    ) -> None: ...
    def _set_dest_call(
        self, dest: Callable[..., Any] | None, nparams: int = 0, out: int = 0
    ) -> None: ...
    def _set_alignment(
        self, align: int, tensor_type: type | None = None, capsule: Any = None
    ) -> None: ...
    def _set_int_ranges(
        self, ranges: tuple[tuple[int, int, int, int], ...], num_in: int, num_params: int
    ) -> None: ...
    def _set_direct_call(
        self,
        func: Any,
        handle: int = 0,
        tensor_type: type | None = None,
        capsule: Any = None,
        error_type: Callable[..., Any] | None = None,
        shape: tuple[int, ...] | None = None,
        like: int = -1,
        dtype: tuple[int, int, int] | None = None,
    ) -> None: ...
    @property
    def _fast_call(self) -> Callable[..., Any] | None: ...
    @property
    def _direct_call(self) -> bool: ...
