"""`python -m specguard_bench bench|calibrate ...`: the `specguard bench|calibrate` commands."""

from __future__ import annotations

import sys

from specguard_bench.cli.parsers import main

if __name__ == "__main__":
    sys.exit(main())
