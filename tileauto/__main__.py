"""``python -m tileauto``: the same command as ``tileauto`` (see :mod:`tileauto.cli`)."""

from __future__ import annotations

import sys

from tileauto.cli import main

if __name__ == "__main__":
    sys.exit(main())
