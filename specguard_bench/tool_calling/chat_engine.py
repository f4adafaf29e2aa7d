"""Every method of the tool-calling suites behind one chat interface: `MethodEngine`.

`MethodEngine(engine, method)` is a `SpecGuardEngine` over the same loaded pair that answers
`generate`/`stream` (messages, OpenAI-style tools, tool choice) with one method:

- the SpecGuard methods (`specguard-balanced`, ...): the engine's own algorithm;
- the baselines (`target`, `draft`, `token-sd`): greedy `model.generate` of one model, or the
  target with transformers' assisted generation and the same draft (`methods.baseline_ids`),
  from the same chat-templated prompt; its text is cut at the engine's step boundaries and every
  tool-call block goes through the engine's parser and schema check (`parse_tool_call`).

So `ChatSpecGuard(engine=MethodEngine(...))` and `SpecGuardLLM(engine=MethodEngine(...))`, and
the framework loops around them, are identical for every method. A baseline's steps have path
"kept" (nothing checks them) and no scores. With `turn_limit`, the call after the limit's last
raises `TurnLimitReached` (what the agents suite counts as a turn limit).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from specguard_bench.common.methods import baseline_ids, preset_of
from specguard_core.config import SpecGuardConfig
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.engine.stream import GenerationStream
from specguard_core.text.chat import (
    InputError,
    Message,
    RawPrompt,
    ToolChoice,
    forced_call_prefix,
    normalise_messages,
    offered_tools,
    parse_tool_call,
    render_prompt,
)
from specguard_core.text.steps import StepRules, call_closed, segment, step_kind, strip_markers
from specguard_core.types import (
    FinishReason,
    GenerationResult,
    RunStats,
    StepRecord,
    ToolCall,
    Usage,
)

BASELINES: tuple[str, ...] = ("target", "draft", "token-sd")


class TurnLimitReached(RuntimeError):
    """An agent asked for one model turn more than its turn limit allows."""


class MethodEngine(SpecGuardEngine):
    """The engine `engine` (its models, caches and runner shared, nothing loaded again) answering
    with `method`; `streams` holds every stream it opened, in order (`results()` their results).
    """

    def __init__(self, engine: SpecGuardEngine, method: str, *,
                 turn_limit: int | None = None) -> None:  # no super().__init__: a view of engine
        if method not in BASELINES and preset_of(method) is None:
            raise ValueError(f"unknown method {method!r}")
        self.__dict__.update(engine.__dict__)
        self.method, self.turn_limit = method, turn_limit
        self.streams: list[GenerationStream] = []
        if method in BASELINES:
            self.model_name = f"{method}:{(self.draft if method == 'draft' else self.target).name}"

    def results(self) -> list[GenerationResult]:
        """The results of the streams that ran to the end."""
        out = []
        for stream in self.streams:
            try:
                out.append(stream.result)
            except RuntimeError:  # stopped early (an error, a cancel)
                continue
        return out

    def stream(self, messages_or_prompt: str | Sequence[Message] | RawPrompt, *,
               tools: Sequence[dict[str, Any]] | None = None, tool_choice: ToolChoice = "auto",
               response_format: Any = None, config: SpecGuardConfig | None = None,
               timeout: float | None = None, parallel_tool_calls: bool = True,
               **overrides: Any) -> GenerationStream:
        """`SpecGuardEngine.stream` with this engine's method (a baseline with
        `parallel_tool_calls=False` stops generating once its first call is closed and ends
        its run at that call, and any baseline ends at a call without its closer, as the
        engine does)."""
        if self.turn_limit is not None and len(self.streams) >= self.turn_limit:
            raise TurnLimitReached(f"turn limit of {self.turn_limit} model turns reached")
        if self.method in BASELINES:
            reading = {k: overrides.pop(k) for k in ("continue_final_message", "top_logprobs",
                                                     "prompt_logprobs") if k in overrides}
            if isinstance(messages_or_prompt, RawPrompt) or any(reading.values()):
                raise InputError(f"the {self.method} baseline writes chat turns with plain "
                                 "generate: no raw prompt, prefill or log-probability options")
            stream = self._plain(messages_or_prompt, tools, tool_choice, response_format,
                                 (config or self.config).merged(**overrides), timeout,
                                 parallel_tool_calls)
        else:
            stream = super().stream(messages_or_prompt, tools=tools, tool_choice=tool_choice,
                                    response_format=response_format, config=config,
                                    timeout=timeout, parallel_tool_calls=parallel_tool_calls,
                                    **overrides)
        self.streams.append(stream)
        return stream

    # ---- the baselines ---------------------------------------------------------------------
    def _plain(self, messages_or_prompt: str | Sequence[Message],
               tools: Sequence[dict[str, Any]] | None, tool_choice: ToolChoice,
               response_format: Any, cfg: SpecGuardConfig, timeout: float | None,
               parallel_tool_calls: bool = True) -> GenerationStream:
        if response_format is not None:
            raise InputError(f"the {self.method} baseline writes with plain generate: a "
                             "response_format is enforced by the SpecGuard methods only")
        if timeout is not None and not timeout > 0:
            raise InputError(f"timeout must be a positive number of seconds, got {timeout!r}")
        messages = normalise_messages(messages_or_prompt)
        checked, required = offered_tools(tools, tool_choice)
        holder: dict[str, GenerationResult] = {}
        steps = self._plain_steps(messages, checked, required, cfg, timeout, holder,
                                  one_call=not parallel_tool_calls)
        return GenerationStream(steps, holder, threading.Event())

    def _plain_steps(self, messages: list[Message], tools: list[dict[str, Any]],
                     required: str | None, cfg: SpecGuardConfig, timeout: float | None,
                     holder: dict[str, GenerationResult], one_call: bool = False
                     ) -> Iterator[StepRecord]:
        t0 = time.perf_counter()
        handle = self.draft if self.method == "draft" else self.target
        forced = handle.encode(forced_call_prefix(required)) if required else []
        prompt = handle.encode(render_prompt(handle.tokenizer, messages, tools)) + forced
        rules = StepRules.for_tokenizer(self.target.tokenizer, cfg.step_delimiters).with_tools(
            [t["function"]["name"] for t in tools])
        at_close = one_call and bool(tools) and rules.tool_close is not None
        stops = list(cfg.stop) + ([str(rules.tool_close)] if at_close else [])
        extra: dict[str, Any] = {}
        if stops:
            extra.update(stop_strings=stops, tokenizer=handle.tokenizer)
        if timeout is not None:
            extra["max_time"] = timeout
        if cfg.max_new_tokens is None:  # the suites pass their own budget (`--max-new-tokens`)
            raise ValueError("a baseline method needs a token budget: set max_new_tokens")
        new = baseline_ids(self, self.method, prompt, cfg.max_new_tokens, **extra)
        eos = bool(new) and new[-1] in handle.eos_ids
        ids = forced + (new[:-1] if eos else new)
        text = handle.decode(ids)
        pieces = segment(text, rules) or [""]
        groups = _split_ids(handle, ids, pieces)
        if eos:
            groups[-1].append(new[-1])
        kinds, in_think = [], False
        for piece in pieces:
            kind, in_think = step_kind(piece, in_think, rules)
            kinds.append(kind)
        n_new = len(new)
        # the run ends where the engine's does: at its first call without parallel calls (the
        # stop string can be passed, a token-SD round accepts several tokens), and at a call
        # without its closer (bare JSON: what follows would be made-up results)
        ends = [i for i, k in enumerate(kinds) if k == "tool_call"
                and (one_call or not call_closed(pieces[i], rules))]
        if ends:
            end = ends[0] + 1
            n_new -= sum(len(g) for g in groups[end:])
            pieces, groups, kinds, eos = _cut(handle, ids, pieces, groups, end), \
                groups[:end], kinds[:end], False
        records = []
        elapsed = time.perf_counter() - t0
        for i, (piece, group, kind) in enumerate(zip(pieces, groups, kinds, strict=True)):
            call = parse_tool_call(piece, tools, self.target.tokenizer,
                                   self.response_template) \
                if kind == "tool_call" else None
            mine = len(group)
            records.append(StepRecord(
                index=i, text=piece, token_ids=group, source="draft" if handle is self.draft
                else "target", kind=kind, confidence=None, grounding=None, score=None,
                accepted=True, n_candidates=1, latency_s=elapsed if i == len(pieces) - 1 else 0.0,
                tool_call=call, path="kept", draft_written=mine if handle is self.draft else 0,
                target_written=0 if handle is self.draft else mine,
                token_logprobs=[None] * mine))
        holder["result"] = self._plain_result(records, cfg, len(prompt), n_new, eos, t0,
                                              handle is self.draft, bool(ends))
        yield from records

    def _plain_result(self, steps: list[StepRecord], cfg: SpecGuardConfig, prompt_tokens: int,
                      new_tokens: int, eos: bool, t0: float, by_draft: bool,
                      at_call: bool = False) -> GenerationResult:
        """The run's result; `at_call`: it was ended at a tool call (a stop)."""
        raw = "".join(s.text for s in steps)
        stopped = at_call or any(stop in raw for stop in cfg.stop)
        for stop in cfg.stop:
            raw = raw.split(stop, 1)[0] if stop in raw else raw
        rules = StepRules()
        answer, reasoning, pos = [], [], 0
        for s in steps:
            text, pos = raw[pos: pos + len(s.text)], pos + len(s.text)
            if s.kind == "answer":
                answer.append(text)
            elif s.kind == "reasoning":
                reasoning.append(strip_markers(text, rules))
        calls: list[ToolCall] = [s.tool_call for s in steps if s.tool_call is not None]
        stats = RunStats(steps=len(steps))
        if by_draft:
            stats.draft_tokens, stats.draft.prefilled = new_tokens, prompt_tokens
        else:
            stats.target_tokens = new_tokens
            if self.method == "target":
                stats.target.prefilled = prompt_tokens
        stats.wall_time_s = time.perf_counter() - t0
        valid = [c for c in calls if c.valid]
        finish: FinishReason = "stop" if eos or stopped else "length"
        return GenerationResult(
            text="".join(answer).strip(), raw_text=raw, reasoning="".join(reasoning).strip(),
            steps=steps, usage=Usage(prompt_tokens, new_tokens), stats=stats,
            finish_reason="tool_calls" if finish == "stop" and valid else finish,
            tool_calls=valid, invalid_tool_calls=[c for c in calls if not c.valid],
            model_name=self.model_name)


def _cut(handle: Any, ids: list[int], pieces: list[str], groups: list[list[int]],
         end: int) -> list[str]:
    """The first `end` pieces, the last one the whole text of its tokens: a token that spans the
    cut (`}\n` after a bare call) stays whole, as in the engine's steps. `ids` are the text's
    tokens (`groups` may end with the end-of-turn token, whose text is never the model's)."""
    kept = ids[:sum(len(group) for group in groups[:end])]
    head = sum(len(p) for p in pieces[:end - 1])
    return pieces[:end - 1] + [handle.decode(kept)[head:]]


def _split_ids(handle: Any, ids: list[int], pieces: Sequence[str]) -> list[list[int]]:
    """`ids` cut into one group per text piece: each group ends at the first token whose
    decoded prefix covers its piece (a token that spans a boundary goes to the earlier piece)."""
    groups, start, pos = [], 0, 0
    for piece in pieces[:-1]:
        pos += len(piece)
        lo, hi = start, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if len(handle.decode(ids[:mid])) >= pos:
                hi = mid
            else:
                lo = mid + 1
        groups.append(ids[start:lo])
        start = lo
    groups.append(ids[start:])
    return groups
