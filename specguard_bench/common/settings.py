"""`BenchSettings`: everything a real-model run depends on, for the reasoning benchmark, its
`--concurrency` mode and the tool-calling suites (which extend it), and its fingerprint.

The fingerprint is what `run.json` records and a resumed run must match (`store.check_resume`,
which adds a digest of each selected task): the settings that change a (task, method) result,
nothing else.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specguard_bench.common.engines import PairSettings, ServedTarget
from specguard_bench.common.methods import METHODS, REMOTE_VARIANT, VARIANTS, preset_of
from specguard_core.config import PRESETS, EngineConfig, NormBounds
from specguard_core.verifiers import SHIPPED_DIR


@dataclass(frozen=True)
class BenchSettings(PairSettings):
    """Everything a benchmark run depends on (the pair's fields are keyword-only);
    `bounds_path` is a NormBounds JSON."""

    out_dir: Path
    dataset: str = "gsm8k"
    n: int = 20
    offset: int = 0
    seed: int = 0
    methods: tuple[str, ...] = METHODS
    max_new_tokens: int = 700
    bounds_path: Path | None = None
    warmup: bool = True
    dataset_file: Path | None = None  # a JSONL of your own problems instead of `dataset`
    served: ServedTarget | None = None  # a target on a vLLM server: adds `specguard-remote`

    def fingerprint(self, bounds: NormBounds | None) -> dict[str, Any]:
        """The settings that change a (problem, method) result; resuming requires equality.
        The values of the presets and variants the run's methods use are part of it, so a method
        is never resumed across a change of its preset; other presets and variants are not (see
        `store.check_resume`: a run can gain methods)."""
        used = {name for m in self.methods if (name := preset_of(m)) is not None}
        variants = {name: VARIANTS[name] for name in sorted(used & set(VARIANTS))}
        presets = ({name for name in used if name in PRESETS}
                   | {base for base, _ in variants.values()}
                   | ({REMOTE_VARIANT[0]} if self.served else set()))
        return {
            "seed": self.seed,
            "presets": {name: dict(sorted(PRESETS[name].items())) for name in sorted(presets)},
            "variants": {name: [base, dict(sorted(fixed.items()))]
                         for name, (base, fixed) in variants.items()},
            "sets": dict(sorted(self.sets.items())),
            "max_new_tokens": self.max_new_tokens,
            "draft": self.draft,
            "target": self.target,
            "device": self.device,
            "dtype": self.dtype,
            "bounds": bounds.model_dump() if bounds is not None else None,
            # what verifier="auto" may resolve to: a retrained card is a new run
            "shipped_cards": shipped_cards(),
            # only when set, so runs stored before the field existed still resume
            **({"heterogeneous": True} if self.heterogeneous else {}),
            **({"batching": True} if self.batching else {}),
            **({"max_batch_rows": self.max_batch_rows}
               if self.max_batch_rows not in (None, EngineConfig().max_batch_rows) else {}),
            **({"served_target": self.served.fingerprint()} if self.served else {}),
            **({"load": loading} if (loading := self.load_fingerprint()) else {}),
        }


def shipped_cards() -> dict[str, str]:
    """sha256 of each verifier card shipped with the package, by file name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(SHIPPED_DIR.glob("*.json"))}
