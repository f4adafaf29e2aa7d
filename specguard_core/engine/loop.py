"""SpecGuardEngine: step-level speculative reasoning with model-internal verification.

`_steps` is the algorithm, top to bottom: propose (draft, k candidates as one batch), select (soft
medoid), score (draft confidence + grounding), decide, accept or regenerate (target), commit.
Loading lives in `loading.py`, per-request bookkeeping in `request.py`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from specguard_core.config import EngineConfig, NormBounds, SpecGuardConfig
from specguard_core.engine import capture
from specguard_core.engine.chat import (
    InputError,
    Message,
    ToolChoice,
    check_tools,
    forced_call_prefix,
    normalise_messages,
    render_prompt,
    required_tool,
)
from specguard_core.engine.handle import ModelHandle
from specguard_core.engine.probe import load_probe
from specguard_core.engine.proposer import Candidate, SampleSpec, propose
from specguard_core.engine.request import Request, Step
from specguard_core.engine.selector import Selector
from specguard_core.engine.signals import percentile_bounds
from specguard_core.engine.steps import StepRules, step_kind
from specguard_core.engine.verifier import Verdict, draft_scores, structural_check, target_scores, verify
from specguard_core.types import GenerationResult, StepRecord


@contextmanager
def _timed(phases: dict[str, float], name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0


class GenerationStream(Iterator[StepRecord]):
    """Committed steps as they come; `.result` holds the `GenerationResult` once exhausted.
    `close()` (or leaving a `with` block) stops generation and frees the engine."""

    def __init__(self, steps: Iterator[StepRecord], holder: dict[str, GenerationResult],
                 cancel: threading.Event, prompt_tokens: int) -> None:
        self._steps, self._holder, self._cancel = steps, holder, cancel
        self.prompt_tokens = prompt_tokens  # the target's prompt length, known before any step

    def __next__(self) -> StepRecord:
        if self._cancel.is_set():
            self.close()
            raise StopIteration
        step = next(self._steps)
        if self._cancel.is_set():  # closed from another thread while this step was running:
            self.close()  # finish the generator here so it releases the engine's lock
        return step

    def __enter__(self) -> GenerationStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop after the step in progress and release the engine. Safe from any thread: when
        another thread is inside `next()`, generation stops at the next step boundary."""
        self._cancel.set()
        close = getattr(self._steps, "close", None)
        try:
            if close:
                close()
        except ValueError:  # "generator already executing" in another thread: the flag stops it
            pass

    @property
    def result(self) -> GenerationResult:
        if "result" not in self._holder:
            raise RuntimeError("the stream has not finished; iterate it to the end first")
        return self._holder["result"]


class SpecGuardEngine:
    """Draft + target pair. Requests are served one at a time (a lock), each with its own state,
    so concurrent callers get exactly what serial calls would."""

    def __init__(self, draft_model: Any, draft_tokenizer: Any, target_model: Any,
                 target_tokenizer: Any, *, config: SpecGuardConfig | None = None,
                 engine_config: EngineConfig | None = None, name: str | None = None) -> None:
        """`config` is the default per-request configuration (a request may override any of it);
        `engine_config` fixes how the pair is wired (e.g. `heterogeneous`)."""
        self.config = config or SpecGuardConfig()
        self.engine_config = engine_config or EngineConfig()
        self.draft = ModelHandle(draft_model, draft_tokenizer)
        self.target = ModelHandle(target_model, target_tokenizer)
        self.same_vocab = draft_tokenizer.get_vocab() == target_tokenizer.get_vocab()
        if not self.same_vocab and not self.engine_config.heterogeneous:
            raise InputError("the draft and target tokenizers have different vocabularies; pick a "
                             "pair that shares a tokenizer, or pass engine_config=EngineConfig("
                             "heterogeneous=True) (steps then pass between the models as text)")
        self.model_name = name or f"specguard:{self.draft.name}+{self.target.name}"
        self._lock = threading.Lock()
        self._selectors: dict[tuple[str, str | None], Selector] = {}
        self._checked_cards: set[tuple[str, str]] = set()  # (card path, model) fingerprints checked

    @classmethod
    def from_pretrained(cls, draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        """Load both models (hub ids, local folders, `.gguf` files, or cached names from
        `specguard models fetch`). Keywords: device, dtype, device_map, config, engine_config,
        preset, progress."""
        from specguard_core.models.loading import load_engine

        return load_engine(cls, draft, target, **kwargs)

    @property
    def context_window(self) -> int:
        return min(self.draft.context_window, self.target.context_window)

    @property
    def tokenizer(self) -> Any:
        return self.target.tokenizer

    def prompt_ids(self, messages_or_prompt: str | Sequence[Message],
                   tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        """The chat-templated prompt as the target tokenizes it."""
        text = render_prompt(self.target.tokenizer, normalise_messages(messages_or_prompt),
                             check_tools(tools))
        return self.target.encode(text)

    # ---- public generation API -------------------------------------------------------------
    def generate(self, messages_or_prompt: str | Sequence[Message], *,
                 tools: Sequence[dict[str, Any]] | None = None, tool_choice: ToolChoice = "auto",
                 config: SpecGuardConfig | None = None, **overrides: Any) -> GenerationResult:
        """Run to completion with `config` (default: the engine's), then any keyword overrides of
        its fields (k=4, tau=0.6, ...)."""
        stream = self.stream(messages_or_prompt, tools=tools, tool_choice=tool_choice,
                             config=config, **overrides)
        for _ in stream:
            pass
        return stream.result

    def stream(self, messages_or_prompt: str | Sequence[Message], *,
               tools: Sequence[dict[str, Any]] | None = None, tool_choice: ToolChoice = "auto",
               config: SpecGuardConfig | None = None, **overrides: Any) -> GenerationStream:
        """Yield each `StepRecord` as soon as it is committed. Input is validated here, eagerly;
        the request runs with `config` (default: the engine's) and keyword overrides of its fields."""
        cfg = (config or self.config).merged(**overrides)
        messages = normalise_messages(messages_or_prompt)
        checked = [] if tool_choice == "none" else check_tools(tools)
        required = required_tool(tool_choice, checked)
        prompts = [self._prompt(h, messages, checked) for h in (self.draft, self.target)]
        req = Request(
            cfg=cfg, tools=checked, required=required,
            rules=StepRules.for_tokenizer(self.target.tokenizer, cfg.step_delimiters)
            .with_tools(bool(checked)),
            draft=self.draft.new_state(), target=self.target.new_state(),
            generator=torch.Generator(self.draft.device).manual_seed(cfg.seed),
            prompt_tokens=len(prompts[1]), context_window=self.context_window,
            tokenizer=self.target.tokenizer,
        )
        req.draft.pending, req.target.pending = prompts
        holder: dict[str, GenerationResult] = {}
        return GenerationStream(self._session(req, holder), holder, req.cancel, req.prompt_tokens)

    def calibrate(self, prompts: Sequence[str | Sequence[Message]], low_q: float = 1.0,
                  high_q: float = 99.0, path: str | None = None, *,
                  config: SpecGuardConfig | None = None, **overrides: Any) -> NormBounds:
        """Fit the normaliser bounds to percentiles of the step signals on unlabeled prompts.
        Every draft step is accepted meanwhile; the signals are the draft's own, or the target's
        when `scoring_model="target"` (then the target runs, but only to score)."""
        conf, ground = [], []
        for prompt in prompts:
            cfg = (config or self.config).merged(**{**overrides, "tau": -math.inf})
            for step in self.generate(prompt, config=cfg).steps:
                if step.confidence is not None:
                    conf.append(step.confidence)
                if step.grounding is not None:
                    ground.append(step.grounding)
        c_lo, c_hi = percentile_bounds(conf, low_q, high_q)
        default = NormBounds()  # beta == 1: no grounding was computed, its bounds do not matter
        g_lo, g_hi = (percentile_bounds(ground, low_q, high_q) if ground
                      else (default.grounding_min, default.grounding_max))
        bounds = NormBounds(confidence_min=c_lo, confidence_max=c_hi, grounding_min=g_lo,
                            grounding_max=g_hi)
        if path:
            bounds.save(path)
        return bounds

    # ---- the algorithm ---------------------------------------------------------------------
    def _session(self, req: Request, holder: dict[str, GenerationResult]
                 ) -> Iterator[StepRecord]:
        with self._lock:
            req.started = time.perf_counter()
            with _timed(req.stats.phase_time_s, "prefill"):
                self.draft.catch_up(req.draft)  # the target prefills when it is first needed
            yield from self._steps(req)
            holder["result"] = req.result(self.model_name)

    def _steps(self, req: Request) -> Iterator[StepRecord]:
        cfg = req.cfg
        selector = self._selector(cfg)
        layers = self._capture_layers(self.draft, cfg)
        pool = self._pool_layers(self.draft, cfg) if cfg.scoring_model == "draft" else ()
        while req.finish is None and not req.cancel.is_set():
            phases: dict[str, float] = {}
            with _timed(phases, "catch_up"):
                self.draft.catch_up(req.draft)
            with _timed(phases, "propose"):
                spec = SampleSpec(cfg.k, cfg.temperature, cfg.top_p, req.budget(req.draft),
                                  req.rules, layers, cfg.sparsify_threshold,
                                  hidden=cfg.k > 1 and selector.mode == "hidden", pool_layers=pool)
                candidates = propose(self.draft, req.draft, spec, req.generator)
            with _timed(phases, "select"):
                pick = selector.select(candidates)
            draft_step = candidates[pick]
            with _timed(phases, "score"):
                verdict = self._verify(req, draft_step)
            if verdict.accepted:
                step = self._accept(req, draft_step, pick, len(candidates), verdict)
            else:
                with _timed(phases, "fallback"):
                    step = self._regenerate(req, pick, selector)
            yield req.commit(step, verdict, phases, draft_step.text)

    def _verify(self, req: Request, cand: Candidate) -> Verdict:
        kind, _ = step_kind(cand.text, req.in_think, req.rules)
        reason, call = structural_check(cand.text, kind, req.tools, req.required,
                                        self.target.tokenizer)
        if req.cfg.scoring_model == "target":
            self.target.catch_up(req.target)
            layers = self._capture_layers(self.target, req.cfg)
            n0 = len(req.target.ids)
            scores = target_scores(self.target, req.target, self._fed(cand), layers, req.cfg,
                                   self._pool_layers(self.target, req.cfg))
            verdict = verify(scores, req.cfg, reason, call)
            if not verdict.accepted:
                self.target.rollback(req.target, n0)
            return verdict
        return verify(draft_scores(cand, req.cfg), req.cfg, reason, call)

    @staticmethod
    def _capture_layers(handle: ModelHandle, cfg: SpecGuardConfig) -> frozenset[int] | None:
        """Layers whose attention rows feed grounding; None (no capture) when beta == 1 gives
        grounding no weight, which is also how to measure what capture costs."""
        return capture.last_layers(handle.model, cfg.grounding_layers) if cfg.beta < 1 else None

    def _pool_layers(self, handle: ModelHandle, cfg: SpecGuardConfig) -> tuple[int, ...]:
        """Hidden layers a verifier card reads from `handle` (its fingerprint checked once per card
        and model; a card for another model is refused); () for the paper's verifier."""
        if cfg.verifier == "paper":
            return ()
        probe = load_probe(cfg.verifier)
        if (cfg.verifier, handle.name) not in self._checked_cards:
            probe.card.check_model(handle.model, handle.tokenizer, cfg.verifier)
            self._checked_cards.add((cfg.verifier, handle.name))
        return probe.card.hidden_layers()

    def _accept(self, req: Request, cand: Candidate, pick: int, k: int, verdict: Verdict) -> Step:
        fed = self._fed(cand)
        self.draft.keep_row(req.draft, pick, fed, cand.next_logits)
        if req.cfg.scoring_model != "target":  # target-scored steps are already in its cache
            req.target.pending += self._convert(fed, self.draft, self.target)
        return Step(cand.token_ids, cand.text, "draft", cand.end == "eos", k, verdict.tool_call)

    def _regenerate(self, req: Request, pick: int, selector: Selector) -> Step:
        """Roll the draft back to the prefix and let the target write this step."""
        self.draft.keep_row(req.draft, pick, [], req.draft.logits)
        self.target.catch_up(req.target)
        prior, prior_ids = "", []
        if req.required and not req.in_think:  # enforce the tool choice: start the call for it
            prior = forced_call_prefix(req.required)
            prior_ids = self.target.encode(prior)
            self.target.extend(req.target, prior_ids)
        cfg = req.cfg
        k = cfg.fallback_k if cfg.fallback == "sample" else 1
        spec = SampleSpec(k, cfg.temperature if cfg.fallback == "sample" else 0.0, cfg.top_p,
                          max(1, req.budget(req.target)), req.rules, None,
                          hidden=k > 1 and selector.mode == "hidden")
        candidates = propose(self.target, req.target, spec, req.generator, prior)
        i = selector.select(candidates)
        cand = candidates[i]
        fed = self._fed(cand)
        self.target.keep_row(req.target, i, fed, cand.next_logits)
        req.draft.pending += self._convert(prior_ids + fed, self.target, self.draft)
        return Step(prior_ids + cand.token_ids, prior + cand.text, "target", cand.end == "eos", k)

    # ---- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _fed(cand: Candidate) -> list[int]:
        return cand.token_ids[: cand.n_fed]

    def _convert(self, ids: list[int], src: ModelHandle, dst: ModelHandle) -> list[int]:
        return ids if self.same_vocab else dst.encode(src.decode(ids))

    def _prompt(self, handle: ModelHandle, messages: list[Message],
                tools: list[dict[str, Any]]) -> list[int]:
        ids = handle.encode(render_prompt(handle.tokenizer, messages, tools))
        window = handle.context_window
        if window and len(ids) >= window:
            raise InputError(f"the prompt has {len(ids)} tokens but {handle.name}'s context window "
                             f"is {window}; shorten the conversation or drop earlier messages")
        return ids

    def _selector(self, cfg: SpecGuardConfig) -> Selector:
        key = (cfg.selector, cfg.sentence_transformer)
        if key not in self._selectors:
            self._selectors[key] = Selector(cfg.selector, cfg.sentence_transformer)
        return self._selectors[key]

