"""Verifier cards shipped with the package (JSON, one per model they were trained on), found by
`verifier="auto"` (`specguard_core.engine.verify.cards.shipped_card`), and in `bounds/` the paper
verifier's normaliser bounds per model (`specguard_core.engine.verify.bounds`), used when a request
keeps the default bounds. Importing this loads no torch."""

from pathlib import Path

SHIPPED_DIR = Path(__file__).resolve().parent
