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
    @property
    def _fast_call(self) -> Callable[..., Any] | None: ...
