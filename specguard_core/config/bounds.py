"""`NormBounds`: the min-max bounds that map the paper verifier's raw signals to [0, 1], and their
JSON file (`save` / `load`, as `specguard calibrate` writes it)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class NormBounds(BaseModel):
    """Min-max bounds that map the raw signals to [0, 1] (values outside are clipped)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    confidence_min: float = Field(-8.0, description="confidence l (mean log-prob) mapped to 0")
    confidence_max: float = Field(0.0, description="confidence mapped to 1")
    grounding_min: float = Field(0.0, description="grounding g mapped to 0")
    grounding_max: float = Field(1.0, description="grounding mapped to 1")

    @model_validator(mode="after")
    def _ordered(self) -> NormBounds:
        for name, value in self.model_dump().items():
            if not math.isfinite(value):
                raise ValueError(f"bounds must be finite numbers, got {name}={value} (a NaN or infinite "
                                 "bound rejects or keeps every step)")
        if not self.confidence_min < self.confidence_max:
            raise ValueError("confidence_min must be < confidence_max")
        if not self.grounding_min < self.grounding_max:
            raise ValueError("grounding_min must be < grounding_max")
        return self

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.model_dump(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> NormBounds:
        """Bounds from a JSON file (as `save` or `specguard calibrate` writes it: the four fields,
        optionally under "bounds"). Raises FileNotFoundError or ValueError naming the file."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"bounds file {path} not found; create it with `specguard calibrate`"
            ) from None
        except (ValueError, RecursionError) as err:  # empty, not JSON, not UTF-8
            raise ValueError(f"bounds file {path} is not valid JSON ({err}); recreate it with "
                             "`specguard calibrate`") from None
        if isinstance(data, dict) and isinstance(data.get("bounds"), dict):
            data = data["bounds"]
        if not isinstance(data, dict):
            raise ValueError(f"bounds file {path} holds a {type(data).__name__}, not an object "
                             "with confidence_min/max and grounding_min/max")
        try:
            return cls.model_validate(data)
        except ValidationError as err:  # one line: each field's problem
            why = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'bounds'}: {e['msg']}"
                            for e in err.errors(include_url=False))
            raise ValueError(f"bounds file {path}: {why}") from None
