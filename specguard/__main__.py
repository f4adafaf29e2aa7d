"""`python -m specguard ...`: the `specguard` command."""

from __future__ import annotations

from specguard.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
