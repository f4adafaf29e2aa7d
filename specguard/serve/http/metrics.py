"""`Metrics`: what `GET /metrics` shows, in Prometheus's text format (prometheus_client), one
registry per app.

- `specguard_requests_total{endpoint, outcome}`: generation requests by how they ended:
  `finished`, `aborted` (the client left), `invalid` (a 4xx), `rejected` (503, the queue full),
  `failed` (a 5xx, or an error reported inside a stream).
- `specguard_requests_running` / `specguard_requests_waiting`: requests in a slot / queued.
- `specguard_prompt_tokens_total` / `specguard_generation_tokens_total`: prompt tokens of
  finished runs (the prompt once per request) and tokens of every committed step.
- `specguard_request_latency_seconds`: a finished request's time from arrival to its last step.
- `specguard_steps_total{path}`: committed steps by `StepRecord.path` (`kept`, `target-checked`,
  `target-verified`, `regenerated`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, get_args

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from specguard_core.types import GenerationResult, StepPath, StepRecord

if TYPE_CHECKING:
    from specguard.serve.http.slots import Slots

Outcome = Literal["finished", "aborted", "invalid", "rejected", "failed"]
ENDPOINTS = ("chat", "completions")
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0)


def outcome_of(status: int) -> Outcome:
    """The outcome of a request answered with HTTP `status` (an error)."""
    if status == 503:
        return "rejected"
    if status == 499:
        return "aborted"
    return "invalid" if status < 500 else "failed"


class Metrics:
    """The server's counters; `slots` gives the running and waiting gauges at scrape time."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, slots: Slots) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("specguard_requests", "Generation requests by how they ended",
                                ["endpoint", "outcome"], registry=self.registry)
        for endpoint in ENDPOINTS:
            for outcome in get_args(Outcome):
                self.requests.labels(endpoint, outcome)
        running = Gauge("specguard_requests_running", "Requests holding a slot (the engine works "
                        "on them)", registry=self.registry)
        running.set_function(lambda: slots.running)
        waiting = Gauge("specguard_requests_waiting", "Requests admitted and waiting for a slot",
                        registry=self.registry)
        waiting.set_function(lambda: slots.admitted - slots.running)
        self.prompt_tokens = Counter("specguard_prompt_tokens", "Prompt tokens of finished "
                                     "requests", registry=self.registry)
        self.generation_tokens = Counter("specguard_generation_tokens", "Tokens of committed "
                                         "steps", registry=self.registry)
        self.latency = Histogram("specguard_request_latency_seconds", "A finished request's "
                                 "time from arrival to its last step", buckets=LATENCY_BUCKETS,
                                 registry=self.registry)
        self.steps = Counter("specguard_steps", "Committed steps by how they were made "
                             "(StepRecord.path)", ["path"], registry=self.registry)
        for path in get_args(StepPath):
            self.steps.labels(path)

    def step(self, step: StepRecord) -> None:
        self.steps.labels(step.path).inc()
        self.generation_tokens.inc(len(step.token_ids))

    def finished(self, endpoint: str, results: Sequence[GenerationResult], seconds: float) -> None:
        self.requests.labels(endpoint, "finished").inc()
        if results:
            self.prompt_tokens.inc(results[0].usage.prompt_tokens)
        self.latency.observe(seconds)

    def ended(self, endpoint: str, outcome: Outcome) -> None:
        self.requests.labels(endpoint, outcome).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
