"""SpecGuardEngine: step-level speculative reasoning with model-internal verification.

The engine's API (the pair wired, `generate`, `stream`, `calibrate`) and the step loop (`_session`:
a request's steps, one turn each). A request starts in `run/start.py` (the caller's input checked,
its `Request` built); one step is `run/step.py`'s `run_step`, the algorithm top to bottom: propose,
select, score and route (keep / target check / reject), keep the draft's step or fall back
(`fallback.py`), commit. Loading: `models/loading.py`; the verifier's glue: `judge.py`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal

from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.model import CachedModel
from specguard_core.cache.state import Target
from specguard_core.concurrency.batcher import Batcher, BatchingHandle
from specguard_core.concurrency.cpu_runner import Runner
from specguard_core.concurrency.turns import Turns
from specguard_core.config import EngineConfig, NormBounds, SpecGuardConfig, default_config
from specguard_core.decoding.grammar import GrammarIndex
from specguard_core.engine.judge import Judge
from specguard_core.engine.request import Phases, Request
from specguard_core.engine.run.prompt import score_prompt
from specguard_core.engine.run.start import Reading, open_request, prompt_ids
from specguard_core.engine.run.step import run_step
from specguard_core.engine.selector import Selector
from specguard_core.engine.stream import GenerationStream
from specguard_core.engine.verify.bounds import fitted_bounds
from specguard_core.models.loading import check_pair, check_vocab
from specguard_core.models.options import LoadOptions
from specguard_core.remote.deadline import capped
from specguard_core.text.chat import (
    InputError,
    Message,
    RawPrompt,
    ToolChoice,
    check_tools,
    token_bytes,
)
from specguard_core.text.tool_calls import response_template
from specguard_core.types import Cancelled, GenerationResult, StepRecord, StepSource


class SpecGuardEngine:
    """Draft + target pair. Concurrent requests take turns step by step (a lock held for one
    step, never while a caller holds a stream), each with its own state, so concurrent callers get
    exactly what serial calls would. With `EngineConfig(batching=True)` they share forwards
    instead (`concurrency/batcher.py`): `batcher` admits them and batches their waiting forwards."""

    def __init__(self, draft_model: Any, draft_tokenizer: Any, target_model: Any,
                 target_tokenizer: Any = None, *, config: SpecGuardConfig | None = None,
                 engine_config: EngineConfig | None = None, name: str | None = None) -> None:
        """`config` is the default per-request configuration (a request may override any of it);
        `engine_config` fixes how the pair is wired (e.g. `heterogeneous`). Each model is a
        transformers model with its tokenizer, or a ready model of the seam (`CachedModel`: a
        `ModelHandle`, or a `LlamaCppHandle` from `specguard_core.llamacpp`); the target may also
        be any `Target`, such as a `RemoteTarget` (a model on a vLLM server). A ready model's own
        tokenizer is used."""
        self.engine_config = engine_config or EngineConfig()
        self.runner = Runner()  # the thread of every forward of a CPU model (`concurrency/cpu_runner.py`)
        self.batcher = Batcher.of(self.engine_config, self.runner)
        if not isinstance(draft_model, CachedModel) and not isinstance(target_model, Target):
            check_pair(draft_model, draft_tokenizer, target_model, target_tokenizer)
        elif not isinstance(draft_model, CachedModel):
            check_vocab(draft_model, draft_tokenizer, "draft")
        self.target: Target = self._ready(target_model, target_tokenizer)
        self.draft: CachedModel = self._ready(draft_model, draft_tokenizer)
        draft_tokenizer = self.draft.tokenizer
        self.config = config or default_config()
        self.response_template = response_template(  # by the target's model type, else draft's
            self.target.tokenizer, getattr(self.target, "model", self.target),
            getattr(self.draft, "model", self.draft))
        same_vocab = draft_tokenizer.get_vocab() == self.target.tokenizer.get_vocab()
        if not same_vocab and not self.engine_config.heterogeneous:
            raise InputError("the draft and target tokenizers have different vocabularies; pick a "
                             "pair that shares a tokenizer, or pass engine_config=EngineConfig("
                             "heterogeneous=True) (steps then pass between the models as text)")
        self.model_name = name or f"specguard:{self.draft.name}+{self.target.name}"
        self._turns = Turns()
        self._selectors: dict[tuple[str, str | None], Selector] = {}
        self.judge = Judge(self.draft, self.target, same_vocab)
        self.grammars = GrammarIndex(  # constrained decoding's token masks, built when first used
            self.target.tokenizer, sorted(self.draft.eos_ids | self.target.eos_ids),
            max(_vocab_width(self.draft), _vocab_width(self.target)))

    @classmethod
    def from_pretrained(cls, draft: str, target: str, *, load: LoadOptions | None = None,
                        config: SpecGuardConfig | None = None,
                        engine_config: EngineConfig | None = None, preset: str | None = None,
                        progress: bool = True, **options: Any) -> SpecGuardEngine:
        """Load both models (hub ids, local folders, `.gguf` files, or cached names from
        `specguard models fetch`) as `load` says (`LoadOptions`: device, dtype, per-model
        overrides, device_map, max_memory, revision, trust_remote_code, quantization, a served
        target's options); `options` are `LoadOptions` fields given as keywords, over `load`'s.
        `config` (or `preset`) is the engine's default request config; `progress` prints a line
        per model as it loads. Every option is checked before anything loads (a ValueError naming
        it).

        A `target` URL (`http://HOST:PORT/v1`, or `load.target_url`) is a model on a vLLM server:
        the draft loads here, the target is reached over HTTP (`target_model`, `target_tokenizer`,
        `target_timeout`, `target_api_key`, `target_top_logprobs`; see
        `specguard_core.remote.load`)."""
        from specguard_core.models.loading import load_engine
        from specguard_core.remote.load import is_url, load_remote_engine

        opts = (load or LoadOptions()).merged(**options)
        if opts.target_url and is_url(target) and target != opts.target_url:
            raise ValueError(f"target={target!r} and target_url={opts.target_url!r} name two "
                             "served targets; pass one")
        target = opts.target_url or target
        common: dict[str, Any] = dict(config=config, engine_config=engine_config, preset=preset,
                                      progress=progress)
        if is_url(target):
            return load_remote_engine(cls, draft, target, load=opts, **common)
        if opts.backend == "llama.cpp":
            from specguard_core.llamacpp.load import load_llamacpp_engine

            return load_llamacpp_engine(cls, draft, target, load=opts, **common)
        return load_engine(cls, draft, target, load=opts, **common)

    @property
    def same_vocab(self) -> bool:
        """The two models share a vocabulary (ids pass between them as they are); else steps
        pass as text (`EngineConfig(heterogeneous=True)`)."""
        return self.judge.same_vocab

    @same_vocab.setter
    def same_vocab(self, value: bool) -> None:
        self.judge.same_vocab = value

    @property
    def context_window(self) -> int:
        """The smaller of the two models' context windows, a model's 0 (unknown) counting as no
        window; 0 when neither is known."""
        known = [w for w in (self.draft.context_window, self.target.context_window) if w > 0]
        return min(known, default=0)

    @property
    def tokenizer(self) -> Any:
        return self.target.tokenizer

    def token_text(self, source: StepSource, token: int, eos: bool = False
                   ) -> tuple[str, bytes] | None:
        """A token of the model `source` names ("draft" or "target": `StepRecord.source`) as
        (text, its own bytes); None for an end-of-turn token, which is not part of the text,
        unless `eos` asks for its text too. A token holding part of a multi-byte character has
        text "\ufffd" but its true bytes (`text.logprobs.Decode`)."""
        handle = self.draft if source == "draft" else self.target
        if token in handle.eos_ids and not eos:
            return None
        text = handle.decode([token])
        return text, token_bytes(handle.tokenizer, token, text)

    def prompt_ids(self, messages_or_prompt: str | Sequence[Message] | RawPrompt,
                   tools: Sequence[dict[str, Any]] | None = None,
                   chat_template_kwargs: Mapping[str, Any] | None = None,
                   continue_final_message: bool | None = None) -> list[int]:
        """The prompt as the target tokenizes it: chat-templated (see `stream` for
        `continue_final_message`), or a `RawPrompt` as it is."""
        return prompt_ids(self, messages_or_prompt, check_tools(tools), chat_template_kwargs,
                          continue_final_message, draft=False)[0][0]

    # ---- public generation API -------------------------------------------------------------
    def generate(self, messages_or_prompt: str | Sequence[Message] | RawPrompt, *,
                 tools: Sequence[dict[str, Any]] | None = None, tool_choice: ToolChoice = "auto",
                 response_format: Any = None, config: SpecGuardConfig | None = None,
                 timeout: float | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 parallel_tool_calls: bool = True, continue_final_message: bool | None = None,
                 top_logprobs: int = 0, prompt_logprobs: bool | Literal["only"] = False,
                 structured_outputs: Any = None,
                 **overrides: Any) -> GenerationResult:
        """Run to completion with `config` (default: the engine's), then any keyword overrides of
        its fields (k=4, tau=0.6, ...). See `stream` for the rest."""
        stream = self.stream(messages_or_prompt, tools=tools, tool_choice=tool_choice,
                             response_format=response_format, config=config, timeout=timeout,
                             chat_template_kwargs=chat_template_kwargs,
                             parallel_tool_calls=parallel_tool_calls,
                             continue_final_message=continue_final_message,
                             top_logprobs=top_logprobs, prompt_logprobs=prompt_logprobs,
                             structured_outputs=structured_outputs, **overrides)
        for _ in stream:
            pass
        return stream.result

    def stream(self, messages_or_prompt: str | Sequence[Message] | RawPrompt, *,
               tools: Sequence[dict[str, Any]] | None = None, tool_choice: ToolChoice = "auto",
               response_format: Any = None, config: SpecGuardConfig | None = None,
               timeout: float | None = None,
               chat_template_kwargs: Mapping[str, Any] | None = None,
               parallel_tool_calls: bool = True, continue_final_message: bool | None = None,
               top_logprobs: int = 0, prompt_logprobs: bool | Literal["only"] = False,
               structured_outputs: Any = None,
               **overrides: Any) -> GenerationStream:
        """Yield each `StepRecord` as soon as it is committed. Input is validated here, eagerly;
        the request runs with `config` (default: the engine's) and keyword overrides of its fields.
        `messages_or_prompt`: a conversation (a string is one user message), rendered with the
        chat template, or a `RawPrompt` (text or token ids) continued as it is, with no template
        and no tools. A conversation that ends with an assistant message with text continues
        that message (a prefill: the reply is its continuation, transformers'
        `continue_final_message`); `continue_final_message=False` closes it and starts a new
        turn instead, True insists on continuing.
        `top_logprobs=N` records the N most likely tokens at each position of the reply
        (`StepRecord.top_logprobs`, 0 to 20). `prompt_logprobs=True`: the target's one pass over
        the prompt scores each of its tokens too (`GenerationResult.prompt_logprobs`, with the
        same alternatives); "only": and the request writes nothing (vLLM's `max_tokens=0`, how
        lm-eval computes log-likelihoods).
        `response_format` ("json", a JSON schema, or OpenAI's json_schema/json_object dict) makes
        the answer one JSON object (matching the schema): every token is constrained to the
        format's grammar (`decoding/reply_grammar.py`), and with tools offered the reply is that
        answer or tool calls; with `response_format_mode="check"` (not for `strict: true`) answer
        steps are checked instead, and a draft answer off the format goes to the target. Bare
        JSON is then never a call. `structured_outputs` (vLLM's: `choice`, `regex`, `json`,
        `grammar`) constrains the answer the same way.
        `timeout` (seconds, from this call, waiting for the engine included) stops the work within
        one forward pass and raises TimeoutError from the stream. `parallel_tool_calls=False`
        ends the reply with its first tool call (OpenAI's and vLLM's field of that name)."""
        req = open_request(self, messages_or_prompt, tools=tools, tool_choice=tool_choice,
                           response_format=response_format, config=config or self.config,
                           timeout=timeout, chat_template_kwargs=chat_template_kwargs,
                           parallel_tool_calls=parallel_tool_calls, overrides=overrides,
                           reading=Reading(continue_final_message, top_logprobs,
                                           prompt_logprobs),
                           structured_outputs=structured_outputs)
        holder: dict[str, GenerationResult] = {}
        return GenerationStream(self._session(req, holder), holder, req.cancel,
                                lambda: req.prompt_scores)

    def calibrate(self, prompts: Sequence[str | Sequence[Message]], low_q: float = 1.0,
                  high_q: float = 99.0, path: str | None = None, *,
                  config: SpecGuardConfig | None = None, **overrides: Any) -> NormBounds:
        """Fit the normaliser bounds to percentiles of the step signals on unlabeled prompts.
        Every draft step is accepted meanwhile; the signals are the draft's own, or the target's
        when `experimental={"scoring_model": "target"}` (then the target runs, but only to score)."""
        conf, ground = [], []
        for prompt in prompts:
            # the bounds normalise the paper's signals, so they are measured as its ensemble sees them
            cfg = (config or self.config).merged(**{**overrides, "tau": -math.inf,
                                                    "verifier": "paper"})
            for step in self.generate(prompt, config=cfg).steps:
                if step.confidence is not None:
                    conf.append(step.confidence)
                if step.grounding is not None:
                    ground.append(step.grounding)
        bounds = fitted_bounds(conf, ground, low_q, high_q)
        if path:
            bounds.save(path)
        return bounds

    # ---- the step loop ---------------------------------------------------------------------
    def _session(self, req: Request, holder: dict[str, GenerationResult]
                 ) -> Iterator[StepRecord]:
        """The request's steps. The engine is held for one step at a time, never across a
        `yield`: a stream left half-read blocks nobody, and a caller may use the engine while it
        iterates a stream. A closed stream ends quietly, a deadline with TimeoutError."""
        req.started = time.perf_counter()
        try:
            with self._admitted(req):
                with self._turn(req):
                    timed = Phases()
                    with timed("prefill"):
                        if req.prompt_logprobs:  # the target's pass over the prompt scores it
                            req.prompt_scores = score_prompt(self.target, req.target,
                                                             req.top_logprobs)
                        if req.finish is None:  # else the target prefills when first needed
                            self.draft.catch_up(req.draft)
                    req.stats.add_time("prefill", timed["prefill"])
                while req.finish is None:
                    with self._turn(req), capped(req.deadline):  # a served target's calls too
                        record = run_step(self, req, self._selector(req.cfg))
                    yield record
        except Cancelled:
            return
        holder["result"] = req.result(self.model_name)

    def _admitted(self, req: Request) -> AbstractContextManager[None]:
        """Batching: a place among the active requests for `req`'s whole life (FIFO)."""
        return nullcontext() if self.batcher is None else self.batcher.admitted(req)

    def _turn(self, req: Request) -> AbstractContextManager[None]:
        """Hold the engine for one step of `req` (`turns.Turns`: waited for in short slices, so a
        cancelled request or one past its deadline stops waiting; lent while a served target
        answers). Batching: the scheduler's step instead (held between forwards only)."""
        return self._turns.step(req) if self.batcher is None else self.batcher.step(req)

    # ---- helpers ---------------------------------------------------------------------------
    def _ready(self, model: Any, tokenizer: Any) -> Any:
        """`model` as a model of the seam: a ready one as it is (a transformers handle on the
        CPU without a runner gets the engine's), a transformers model wrapped. Batching needs
        transformers models (its padded forwards are theirs)."""
        if not isinstance(model, CachedModel | Target):
            return self._handle(model, tokenizer)
        if self.batcher is not None and isinstance(model, CachedModel) \
                and model.backend != "transformers":
            raise InputError(f"EngineConfig(batching=True) batches transformers models' forwards; "
                             f"{model.name} ({type(model).__name__}) takes its requests' steps in "
                             "turns: drop batching")
        if isinstance(model, ModelHandle) and model.runner is None and _on_cpu(model.model):
            model.runner = self.runner
        return model

    def _handle(self, model: Any, tokenizer: Any) -> ModelHandle:
        """The handle of an in-process transformers model; a model with weights on the CPU runs
        its forwards on the engine's runner (on a GPU alone they stay in the calling thread,
        except a batching engine's rounds, which always run on the runner)."""
        runner = self.runner if _on_cpu(model) else None
        if self.batcher is None:
            return ModelHandle(model, tokenizer, runner=runner)
        return BatchingHandle(model, tokenizer, self.batcher, runner=runner)

    def _selector(self, cfg: SpecGuardConfig) -> Selector:
        key = (cfg.experimental.selector, cfg.experimental.sentence_transformer)
        if key not in self._selectors:
            self._selectors[key] = Selector(*key)
        return self._selectors[key]


def _vocab_width(handle: Target) -> int:
    """The width of `handle`'s logits (its lm_head may be padded past the tokenizer)."""
    return max(int(getattr(handle, "vocab_width", 0) or 0), len(handle.tokenizer))


def _on_cpu(model: Any) -> bool:
    """Whether any of `model`'s weights are on the CPU (a CPU model, or one offloaded in part)."""
    return any(p.device.type == "cpu" for p in model.parameters())
