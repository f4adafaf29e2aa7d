"""A target on a vLLM server: the draft stays in-process, the target is reached over vLLM's
OpenAI-compatible API, always with token ids (never text), so both sides agree on every token.

- A pass over tokens (`try_tokens`: the target check, speculative verification) is one
  `/v1/completions` call with `prompt` = committed ids + the tokens, `max_tokens=1` and
  `prompt_logprobs=K`: the server's top-K log-probs at every position. The pass's logits rows
  hold those log-probs and `NEG` elsewhere (`[T+1, V]`), so greedy decisions (argmax) are exact;
  anything that needs the whole distribution sees it renormalised over the top K (plus the token
  itself): typical acceptance's entropy, and sampling (top-K sampling of the target).
  `try_more` grows a pass (the check while the draft writes) with one more such request over
  the whole prefix (a prefill on the server each time).
- A rejected step (`write_step`) is one `/v1/completions` call with the committed ids, the step's
  token budget and `stop` at the step markers; its tokens are read back as ids and cut where the
  engine's own step rules end the step (`StepText`), continuing the call when a marker the
  server stopped at does not end the step (a delimiter inside a tool call).
- The "cache" is the committed ids: `keep`/`discard`/`rollback` only move that list; the server's
  automatic prefix caching does the rest.

A request counts as one forward call of the target. The HTTP side (`http.ServerClient`)
lends the engine to its other requests while it waits, so concurrent requests reach the server
together and it batches them. Errors name the server and say what to do (`RemoteTargetError`).
The model's address, name and tokenizer, and the check that the server serves that model with that
tokenizer (`connect`), are `served.ServedModel`'s, which `RemoteTarget` extends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.state import CacheState, TentativePass
from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.proposal import Candidate, Proposal, SampleSpec
from specguard_core.remote.http import RemoteTargetError  # noqa: F401 (re-exported)
from specguard_core.remote.served import PROBE, ServedModel  # noqa: F401 (PROBE re-exported)
from specguard_core.text.chat import InputError
from specguard_core.text.step_text import StepText

NEG = -1.0e4  # the logit of a token outside the server's top K (finite: entropy stays a number)


def check_served_target(cfg: SpecGuardConfig) -> None:
    """What a request cannot ask of a target on a server: an InputError that says what to use."""
    if cfg.experimental.scoring_model == "target":
        raise InputError("experimental={'scoring_model': 'target'} reads the target's attention "
                         "and hidden states, which a served target does not expose; score with "
                         "the draft (the default scoring model)")
    if cfg.repetition_penalty != 1.0:
        raise InputError("repetition_penalty needs the target's raw logits, which a served target "
                         "does not return (its passes give log-probabilities); leave it at 1 or "
                         "use an in-process target")
    if cfg.presence_penalty or cfg.frequency_penalty:
        raise InputError("presence_penalty and frequency_penalty count the reply's tokens, but a "
                         "served target writes steps with vLLM's own penalties, which count only "
                         "the tokens of one request; leave them at 0 or use an in-process target")
    hidden = cfg.experimental.selector == "hidden"
    if cfg.fallback == "sample" and cfg.fallback_samples > 1 and hidden:
        raise InputError(f"fallback_k={cfg.fallback_samples} samples from a served target carry no "
                         "hidden states for the selector to compare; use fallback='speculative' "
                         "or 'greedy', fallback_k=1, or experimental={'selector': "
                         "'sentence-transformer'}")


class RemoteTarget(ServedModel):
    """A target model served by vLLM at `url` (`http://HOST:PORT/v1`) under the name `model`: the
    `Target` protocol over the server's completions (the constructor and `connect` are
    `ServedModel`'s: `tokenizer` must be the served model's, `vocab_size` is the width of the
    logits rows). Constructing one touches no network; `connect` asks the server and checks it."""

    # ---- the cache protocol (see `cache/model.py`): the committed ids are the whole state ----------
    def new_state(self) -> CacheState:
        return CacheState(cache=None)  # the server caches the prefix

    def catch_up(self, state: CacheState) -> None:
        pending, state.pending = state.pending, []
        self.extend(state, pending)

    def extend(self, state: CacheState, ids: list[int]) -> None:
        if ids:
            state.ids.extend(ids)
            state.counters.prefilled += len(ids)
            state.logits = None

    def try_tokens(self, state: CacheState, ids: list[int], *,
                   recorder: AttentionRecorder | None = None,
                   hidden: bool = False) -> TentativePass:
        """One request: the pending tokens (committed here) and `ids` (not committed); the
        pass's `logits: [T+1, V]` row i predicts `ids[i]`, row T the token after all of them."""
        if recorder is not None or hidden:
            raise ValueError("a remote target gives no attention rows or hidden states; score "
                             "with the draft (the default scoring model)")
        self.catch_up(state)
        if not ids and state.logits is not None:
            return TentativePass(self, state, [], state.logits[None], None)
        if not state.ids:
            raise ValueError("a remote target pass needs a non-empty committed prefix")
        return TentativePass(self, state, list(ids), self._pass(state, state.ids, ids), None)

    def try_more(self, tpass: TentativePass, ids: list[int]) -> None:
        """Grow `tpass` by `ids` (`TentativePass.extend`): one request over the committed ids,
        the pass's tokens and `ids` (the server re-encodes it all: vLLM skips its prefix cache
        for prompt_logprobs), whose rows for `ids` replace the pass's last row."""
        if ids:
            rows = self._pass(tpass.state, tpass.state.ids + tpass.ids, ids)  # [T'+1, V]
            tpass.ids = tpass.ids + list(ids)
            tpass.logits = torch.cat([tpass.logits[:-1], rows])  # [T+T'+1, V]

    def _pass(self, state: CacheState, prefix: list[int], ids: list[int]) -> torch.Tensor:
        """One request over `prefix + ids`: the logits rows `[T+1, V]` predicting each of `ids`
        and the token after them (counted as one forward of `state`)."""
        start = len(prefix)
        body = {"prompt": prefix + ids, "max_tokens": 1, "temperature": 0.0,
                "logprobs": self.top_logprobs, "return_tokens_as_token_ids": True}
        if ids:
            body["prompt_logprobs"] = self.top_logprobs
        choice = self.http.complete(body, "verify tokens")[0]
        state.counters.forward_calls += 1
        state.counters.tentative += len(ids)
        logits = torch.full((len(ids) + 1, self.vocab_size), NEG)  # [T+1, V]
        try:
            prompt_rows = choice["prompt_logprobs"] if ids else []
            for row in range(len(ids)):
                entry = prompt_rows[start + row]
                self._fill(logits[row], {int(k): v["logprob"] for k, v in entry.items()})
            top = choice["logprobs"]["top_logprobs"][0]
            self._fill(logits[len(ids)], {_token_id(k): v for k, v in top.items()})
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            raise self.http.unexpected("verify tokens", err) from None
        return logits

    def commit_row(self, state: CacheState, row: int, new_ids: list[int],
                   logits: torch.Tensor | None) -> None:
        state.ids.extend(new_ids)
        state.logits = logits

    def drop_uncommitted(self, state: CacheState) -> None:
        return None  # nothing uncommitted is held here

    def rollback(self, state: CacheState, n_tokens: int) -> None:
        if n_tokens < len(state.ids):
            state.counters.discarded += len(state.ids) - n_tokens
            del state.ids[n_tokens:]
            state.logits = None

    def unwind(self, state: CacheState, n_tokens: int) -> None:
        drop = min(n_tokens, len(state.pending))
        del state.pending[len(state.pending) - drop:]
        if n_tokens > drop:
            self.rollback(state, len(state.ids) - (n_tokens - drop))

    # ---- writing a step -----------------------------------------------------------------
    def write_step(self, state: CacheState, spec: SampleSpec, generator: torch.Generator,
                   prior: str = "", check: Callable[[], None] | None = None) -> Proposal:
        """`spec.k` steps written by the server after the committed prefix, each ending where
        `spec.rules` end a step (or at EOS, or the budget; trimmed to whole characters). Greedy
        at temperature 0, else sampled with a seed drawn from `generator`. Candidates carry the
        server's log-probabilities of their tokens, but no attention rows, hidden states or
        sampling probabilities."""
        self.catch_up(state)
        texts = [StepText(self, spec.rules, spec.max_tokens, prior, spec.grace, spec.call_tokens)
                 for _ in range(spec.k)]
        logprobs: list[list[float]] = [[] for _ in range(spec.k)]
        pending = list(range(spec.k))  # candidates whose step has not ended yet
        first = True
        while pending:
            if check is not None:
                check()
            n = len(pending) if first else 1
            done = texts[pending[0]].token_ids if not first else []
            asked = max(1, texts[pending[0]].room())
            choices = self._generate(state.ids + done, n, spec, asked, generator, state)
            for i, (ids, lps, finished) in zip(pending[:n], choices, strict=True):
                for tok, lp in zip(ids, lps, strict=True):
                    texts[i].add(tok)
                    logprobs[i].append(lp)
                    if texts[i].end is not None:
                        break
                # the server wrote all it was asked and the step may go on (to a whole
                # character, or an open tool call's closer): ask again
                extending = len(ids) >= asked and texts[i].room() > 0
                if texts[i].end is None and (not ids or (finished and not extending)):
                    texts[i].end = "budget"  # the server ended without a step marker or EOS
            pending = [i for i in pending if texts[i].end is None]
            first = False
        cands = []
        for text, lps in zip(texts, logprobs, strict=True):
            if text.end == "budget":
                text.trim()
            eos = text.end == "eos"
            cands.append(Candidate(token_ids=text.token_ids, text=text.text, end=text.end,
                                   n_fed=len(text.token_ids) - eos,
                                   logprobs=lps[: len(text.token_ids)]))
        return Proposal(self, state, cands)

    def _generate(self, prompt: list[int], n: int, spec: SampleSpec, max_tokens: int,
                  generator: torch.Generator, state: CacheState
                  ) -> list[tuple[list[int], list[float], bool]]:
        """`n` continuations of `prompt`: (their token ids, each token's log-probability as the
        server reports it, whether the server stopped for a reason other than a stop string, i.e.
        EOS or the token budget)."""
        rules = spec.rules
        markers = rules.delimiters + (rules.think_close, rules.think_open) + \
            tuple(m for m in (rules.tool_open,) if m)
        body: dict[str, Any] = {
            "prompt": prompt, "n": n, "max_tokens": max(1, max_tokens), "stop": list(markers),
            "stop_token_ids": sorted(self.eos_ids), "include_stop_str_in_output": True,
            "skip_special_tokens": False, "logprobs": 0, "return_tokens_as_token_ids": True,
            "temperature": spec.temperature, "top_p": spec.top_p if spec.temperature else 1.0,
            # the request's top-k / min-p (repetition penalties are refused for a served target:
            # its passes return log-probs, on which the penalty's sign rule is wrong)
            "top_k": spec.shaping.top_k if spec.shaping.top_k > 0 else -1,
            "min_p": spec.shaping.min_p}
        if spec.temperature > 0:
            body["seed"] = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
        choices = self.http.complete(body, "write a step")
        state.counters.forward_calls += 1
        out = []
        try:
            for choice in sorted(choices, key=lambda c: int(c["index"]))[:n]:
                ids = [_token_id(t) for t in choice["logprobs"]["tokens"]]
                lps = [_logprob(x) for x in choice["logprobs"]["token_logprobs"]]
                if len(lps) != len(ids):
                    raise ValueError(f"{len(lps)} log-probs for {len(ids)} tokens")
                if any(not 0 <= i < self.vocab_size for i in ids):  # as `_fill` checks its rows
                    raise ValueError(f"token id outside the vocabulary ({self.vocab_size})")
                stopped_on_text = isinstance(choice.get("stop_reason"), str)
                state.counters.decoded += len(ids)
                out.append((ids, lps, not stopped_on_text))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise self.http.unexpected("write a step", err) from None
        if len(out) != n:
            raise self.http.unexpected("write a step", ValueError(f"{len(out)} choices, not {n}"))
        return out

    def _fill(self, row: torch.Tensor, logprobs: dict[int, Any]) -> None:
        """Write the server's log-probs into one logits row `[V]` (ids outside V are refused)."""
        ids = list(logprobs)
        if any(not 0 <= i < self.vocab_size for i in ids):
            raise ValueError(f"token id outside the vocabulary ({self.vocab_size})")
        values = torch.tensor([_logprob(v) for v in logprobs.values()]).clamp(NEG, 0)
        row[torch.tensor(ids, dtype=torch.long)] = values

    def __repr__(self) -> str:
        return f"RemoteTarget({self.model_name!r} at {self.url})"


def _logprob(value: Any) -> float:
    """A log-probability the server reported, as a float; NaN or one above 0 (a probability
    over 1, beyond rounding) is a ValueError. -inf (probability 0) is one."""
    lp = float(value)
    if not lp <= 1e-3:
        raise ValueError(f"log-probability {lp} is not one")
    return lp


def _token_id(token: object) -> int:
    """`"token_id:123"` (vLLM's `return_tokens_as_token_ids` spelling) -> 123."""
    text = str(token)
    if not text.startswith("token_id:"):
        raise ValueError(f"token {text[:40]!r} is not an id (return_tokens_as_token_ids ignored)")
    return int(text.removeprefix("token_id:"))
