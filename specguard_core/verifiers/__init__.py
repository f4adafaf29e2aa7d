"""Verifier cards shipped with the package (JSON, one per model they were trained on), found by
`verifier="auto"` (`specguard_core.engine.verify.cards.shipped_card`). Importing this loads no torch."""

from pathlib import Path

SHIPPED_DIR = Path(__file__).resolve().parent
