"""`EngineConfig`: how the engine wires its pair, fixed at construction (never per request)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EngineConfig(BaseModel):
    """How the engine wires its pair; fixed at construction, not changeable per request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    heterogeneous: bool = Field(False, description="draft and target have different tokenizers; "
                                "steps cross between them as text")
    batching: bool = Field(False, description="concurrent requests share forwards: each model "
                           "forward of every active request waits for a scheduling round, which runs "
                           "the waiting calls as one padded forward per model (concurrency/batcher.py); "
                           "off: requests take turns step by step")
    max_batch_rows: int = Field(16, ge=1, description="batching: most request rows in one forward "
                                "(more waiting rows run as further forwards of the same round)")
    max_active_requests: int = Field(16, ge=1, description="batching: most requests admitted at "
                                     "once (their KV caches are held); later ones wait in order")
    batch_window_s: float = Field(0.05, ge=0, description="batching: a round runs when every "
                                  "request inside a step waits for a forward, or when the engine "
                                  "has been idle this many seconds with forwards waiting")
