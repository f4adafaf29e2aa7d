"""/v1/completions results -> OpenAI's `text_completion`: the raw text the models wrote (no
answer extraction, nothing stripped), the prompt before it with `echo`, and OpenAI's legacy
`logprobs` object (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`), the prompt's
tokens first with `echo`. Pure functions; `chunks.py` streams the same pieces.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openai.types import Completion, CompletionChoice
from openai.types.completion_choice import Logprobs

from specguard.serve.api.convert import openai_finish, run_trace, usage
from specguard_core.text.logprobs import Decode, RunTokens, TokenEntry, finite, prompt_tokens
from specguard_core.types import GenerationResult


@dataclass(frozen=True)
class Shape:
    """What a completion choice carries: the prompt's text first (`echo`), and log-probabilities
    with `logprobs` alternatives per token (None: none)."""

    echo: bool = False
    logprobs: int | None = None


def written(result: GenerationResult) -> str:
    """The completion's text: everything committed, cut at the first stop string."""
    return result.raw_text


def cut_short(result: GenerationResult) -> bool:
    """Whether a stop string cut the text (then tokens past it are not reported)."""
    return len(result.raw_text) < sum(len(s.text) for s in result.steps)


def run_entries(result: GenerationResult, decode: Decode) -> list[TokenEntry]:
    """The written tokens (an EOS the run ended with included, as vLLM lists it), up to the stop
    string that cut the text."""
    tokens = RunTokens(decode, answer_only=False, with_eos=True)
    for step in result.steps:
        tokens.add(step)
    return tokens.take(len(result.raw_text.encode("utf-8")) if cut_short(result) else None)


def logprobs_object(entries: Sequence[TokenEntry], offset: int, n: int) -> Logprobs:
    """OpenAI's legacy logprobs: each token, its log-probability, its `n` most likely
    alternatives with the token itself (as vLLM gives them), and where it starts in the choice's
    text (`offset`: the first token's). The prompt's first token has null for both, as in
    OpenAI's and vLLM's responses; built without validation, which would refuse those nulls."""
    tokens: list[str] = []
    lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    for e in entries:
        tokens.append(e.token)
        offsets.append(offset)
        offset += len(e.token) if not e.eos else 0
        if e.logprob is None:
            lps.append(None)
            tops.append(None)
            continue
        lps.append(finite(e.logprob))
        top = {t: finite(lp) for t, _, lp in e.top[:n]}
        top.setdefault(e.token, finite(e.logprob))
        tops.append(top)
    fields: dict[str, Any] = {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops,
                              "text_offset": offsets}
    return Logprobs.model_construct(**fields)


def choice(result: GenerationResult, index: int, prompt_text: str, shape: Shape,
           decode: Decode) -> CompletionChoice:
    """One prompt's choice: its text (after the prompt with `echo`) and log-probabilities."""
    head = prompt_text if shape.echo else ""
    lp = None
    if shape.logprobs is not None:
        entries = run_entries(result, decode)
        if shape.echo and result.prompt_logprobs is not None:
            entries = prompt_tokens(result.prompt_logprobs, decode) + entries
        lp = logprobs_object(entries, 0, shape.logprobs)
    return CompletionChoice(index=index, text=head + written(result), logprobs=lp,
                            finish_reason=openai_finish(result.finish_reason))


def response(results: Sequence[GenerationResult], prompt_texts: Sequence[str], n: int,
             rid: str, model: str, shape: Shape, decode: Decode) -> Completion:
    """The `text_completion` of prompts x n runs (prompt by prompt, `n` choices each, indexed
    in that order as OpenAI does); usage counts each prompt once; `specguard` holds each run's
    trace ({"choices": [...]} for several)."""
    choices = [choice(r, i, prompt_texts[i // n], shape, decode) for i, r in enumerate(results)]
    traces = [run_trace(r) for r in results]
    return Completion(id=rid, object="text_completion", created=int(time.time()), model=model,
                      choices=choices, usage=usage(results, n),
                      specguard=traces[0] if len(traces) == 1 else {"choices": traces})
