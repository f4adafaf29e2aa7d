"""The compared methods, each run on one problem and timed the same way.

- `target`, `draft`: greedy `model.generate` of one model alone (on `--backend llama.cpp`:
  llama.cpp alone, `backend_baselines.llama_greedy`).
- `token-sd`: token-level speculative decoding, transformers' assisted generation
  (`target.generate(..., assistant_model=draft)`), greedy, so its output equals `target`'s up to
  kernel rounding (on `--backend llama.cpp`: the project's own token-level SD over the backend,
  `backend_baselines.token_sd`, as llama-cpp-python offers no draft-model speculation).
- `specguard-paper`, `specguard-balanced`, `specguard-fast`: `engine.generate` with the named
  preset, then the user's `--set` overrides (global `key=value`, or `paper.key=value` /
  `balanced.key=value` / `fast.key=value` for one preset).
- `specguard-paper-sd`: the paper preset with the speculative fallback (`fallback="speculative"`)
  instead of its k-sample fallback; `paper.key=value` overrides apply to it too.
- `specguard-remote` (only with a served target, `--target-url`): the balanced preset run by a
  second engine whose target is on a vLLM server; `balanced.key=value` overrides apply to it too.

Latency is wall-clock around everything a caller would do for one answer: templating the prompt,
generation, decoding (CUDA is synchronised before the clock stops). `count_calls` counts a model's
forwards and the time in them, for the scripts in `benchmarks/`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from specguard_core.config import PRESETS, NormBounds, SpecGuardConfig
from specguard_core.types import GenerationResult

if TYPE_CHECKING:  # torch and transformers load only when a method runs (`specguard --help` stays fast)
    from transformers import GenerationConfig

METHODS: tuple[str, ...] = ("target", "draft", "token-sd", "specguard-paper", "specguard-paper-sd",
                             "specguard-balanced", "specguard-fast", "specguard-balanced-typical",
                             "specguard-balanced-numbers", "specguard-balanced-strict",
                             "specguard-balanced-runs", "specguard-balanced-vouched")
# method variants: a preset with fixed changes (applied before the user's overrides)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "paper-sd": ("paper", {"fallback": "speculative"}),
    # the target check's lossy rules on the (lossless) balanced preset: typical acceptance (the
    # opt-in), exact on numbers only, and typical with a stricter typical_ratio
    "balanced-typical": ("balanced", {"acceptance": "typical"}),
    "balanced-numbers": ("balanced", {"acceptance": "exact-numbers"}),
    "balanced-strict": ("balanced", {"acceptance": "typical", "typical_ratio": 0.7}),
    # lossless, with the check's draft runs ended as the fallback's are: once the product of the
    # draft's probabilities of the unchecked tokens falls below 0.5 (the preset's own value since
    # it was adopted; kept so the runs that compared the two still resume)
    "balanced-runs": ("balanced", {"check_run_below": 0.5}),
    # typical only for steps the learned card vouches for (P(correct) >= 0.87, its 95%-precision
    # threshold, as in `fast`), exact for the rest
    "balanced-vouched": ("balanced", {"acceptance": "vouched", "tau": 0.87, "route": "check"}),
}
# the method of a served target: not in METHODS (it needs --target-url) nor in VARIANTS (which is
# part of every run's fingerprint, so runs stored before it existed still resume)
REMOTE_METHOD = "specguard-remote"
REMOTE_VARIANT: tuple[str, dict[str, Any]] = ("balanced", {})


@dataclass
class MethodOutput:
    """What one method produced for one problem. `result` is the engine's result for SpecGuard
    methods (None for the baselines)."""

    text: str
    new_tokens: int
    prompt_tokens: int
    latency_s: float
    finish_reason: str
    prefilled_draft: int | None = None
    prefilled_target: int | None = None
    result: GenerationResult | None = None


def check_methods(methods: Sequence[str], *, remote: bool = False) -> tuple[str, ...]:
    """Validate method names (order kept, duplicates dropped); `specguard-remote` only when a
    served target is configured (`remote`)."""
    if REMOTE_METHOD in methods and not remote:
        raise ValueError(f"{REMOTE_METHOD} runs the target on a vLLM server; give its address "
                         "with --target-url (and --target-model)")
    known = (*METHODS, REMOTE_METHOD) if remote else METHODS
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(known)}")
    return tuple(dict.fromkeys(methods))


def variant_of(method: str) -> tuple[str, dict[str, Any]] | None:
    """(preset, fixed changes) a SpecGuard method runs with; None for the baselines."""
    name = preset_of(method)
    if name is None:
        return None
    if method == REMOTE_METHOD:
        return REMOTE_VARIANT
    return VARIANTS.get(name, (name, {}))


def preset_of(method: str) -> str | None:
    """`specguard-<preset>` -> `<preset>`; None for the baselines."""
    return method.removeprefix("specguard-") if method.startswith("specguard-") else None


def split_overrides(sets: Mapping[str, Any], preset: str) -> dict[str, Any]:
    """The overrides that apply to `preset`: global keys, then `<preset>.<key>` keys (which win);
    keys scoped to another preset are dropped."""
    scoped = {k.split(".", 1)[1]: v for k, v in sets.items() if k.startswith(f"{preset}.")}
    plain = {k: v for k, v in sets.items() if "." not in k}
    return {**plain, **scoped}


def specguard_config(
    base: SpecGuardConfig,
    method: str,
    sets: Mapping[str, Any],
    *,
    max_new_tokens: int,
    bounds: NormBounds | None = None,
) -> SpecGuardConfig:
    """The full, validated config a SpecGuard method runs with: `base` (the engine's config), the
    preset, the `--set` overrides, `max_new_tokens` and, if given, the calibrated `bounds`."""
    preset, fixed = variant_of(method) or (None, {})
    if preset is None or preset not in PRESETS:
        raise ValueError(f"{method} is not a SpecGuard preset method")
    extra: dict[str, Any] = {"max_new_tokens": max_new_tokens}
    if bounds is not None:
        extra["bounds"] = bounds
    # the preset first, so an override of `tau` alone resets its tau_accept/tau_reject
    return base.merged(**PRESETS[preset]).merged(**fixed).merged(
        **{**split_overrides(sets, preset), **extra})


def greedy_config(
    eos_ids: Sequence[int], pad_id: int | None, max_new_tokens: int
) -> GenerationConfig:
    """A fresh greedy generation config (no sampling, no repetition penalty from the model's own
    generation_config), stopping at any of `eos_ids`."""
    from transformers import GenerationConfig

    eos = sorted(eos_ids)
    config: GenerationConfig = cast(Any, GenerationConfig)(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos,
        pad_token_id=pad_id if pad_id is not None else eos[0],
    )
    return config


def _sync(model: Any) -> None:
    """Wait for `model`'s CUDA work (nothing for a CPU model or a served target, which has none)."""
    import torch

    if model is None:
        return
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def baseline_ids(engine: Any, method: str, prompt: Sequence[int], max_new_tokens: int,
                 **generate: Any) -> list[int]:
    """Greedy `model.generate` of a baseline method (`target`, `draft`, `token-sd`: the target
    with transformers' assisted generation and the engine's draft) from `prompt` ids in the
    vocabulary of the model that writes (`engine.draft` for `draft`, else `engine.target`); the
    new ids. `generate` are extra `generate` keywords (e.g. `stop_strings`, `tokenizer`)."""
    import torch

    handle = engine.draft if method == "draft" else engine.target
    if getattr(handle, "backend", "transformers") != "transformers":
        from specguard_bench.common.backend_baselines import llama_greedy, token_sd

        if generate:
            raise ValueError(f"{sorted(generate)}: not on the {handle.backend} backend")
        if method == "token-sd":
            return token_sd(engine.draft, engine.target, prompt, max_new_tokens)
        return llama_greedy(handle, prompt, max_new_tokens)
    ids = torch.tensor([list(prompt)], device=next(handle.model.parameters()).device)
    cfg = greedy_config(handle.eos_ids, handle.tokenizer.pad_token_id, max_new_tokens)
    extra: dict[str, Any] = dict(generate)
    if method == "token-sd":
        extra["assistant_model"] = engine.draft.model
        if not getattr(engine, "same_vocab", True):
            extra["tokenizer"] = engine.target.tokenizer
            extra["assistant_tokenizer"] = engine.draft.tokenizer
    with torch.inference_mode():
        out = handle.model.generate(
            ids, attention_mask=torch.ones_like(ids), generation_config=cfg, **extra
        )
    new: list[int] = out[0, len(prompt):].tolist()
    _sync(handle.model)
    return new


def _hf_run(
    engine: Any, method: str, messages: Sequence[Mapping[str, Any]], max_new_tokens: int
) -> MethodOutput:
    handle = engine.draft if method == "draft" else engine.target
    t0 = time.perf_counter()
    if handle is engine.target or getattr(engine, "same_vocab", True):
        prompt = engine.prompt_ids(list(messages))
    else:
        text = handle.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=True
        )
        prompt = list(handle.tokenizer(text, add_special_tokens=False)["input_ids"])
    new = baseline_ids(engine, method, prompt, max_new_tokens)
    text = handle.tokenizer.decode(new, skip_special_tokens=True)
    latency = time.perf_counter() - t0
    finish = "stop" if new and new[-1] in handle.eos_ids else "length"
    prefilled = len(prompt) if method != "token-sd" else None
    return MethodOutput(
        text=text,
        new_tokens=len(new),
        prompt_tokens=len(prompt),
        latency_s=latency,
        finish_reason=finish,
        prefilled_draft=prefilled if method == "draft" else None,
        prefilled_target=prefilled if method == "target" else None,
    )


def _specguard_run(
    engine: Any, config: SpecGuardConfig, messages: Sequence[Mapping[str, Any]]
) -> MethodOutput:
    t0 = time.perf_counter()
    res: GenerationResult = engine.generate(list(messages), config=config)
    _sync(getattr(engine.target, "model", getattr(engine.draft, "model", None)))  # llama.cpp, vLLM: none
    latency = time.perf_counter() - t0
    return MethodOutput(
        text=res.raw_text,
        new_tokens=res.usage.completion_tokens,
        prompt_tokens=res.usage.prompt_tokens,
        latency_s=latency,
        finish_reason=res.finish_reason,
        prefilled_draft=res.stats.draft.prefilled,
        prefilled_target=res.stats.target.prefilled,
        result=res,
    )


def run_method(
    engine: Any,
    method: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    max_new_tokens: int,
    seed: int = 0,
    sets: Mapping[str, Any] | None = None,
    bounds: NormBounds | None = None,
) -> MethodOutput:
    """Run `method` on one conversation and time it. `seed` seeds torch and the engine's sampler
    (pass a per-problem seed so runs are reproducible and resumable); `sets`/`bounds` apply to the
    SpecGuard methods only. `text` is everything generated (for SpecGuard the raw committed text,
    reasoning included), which is what the answer is extracted from."""
    import torch

    torch.manual_seed(seed)
    if preset_of(method) is None:
        return _hf_run(engine, method, messages, max_new_tokens)
    config = specguard_config(
        engine.config, method, sets or {}, max_new_tokens=max_new_tokens, bounds=bounds
    )
    return _specguard_run(engine, config.merged(seed=seed), messages)


def count_calls(obj: Any, method: str, key: str, seen: MutableMapping[str, list[float]]) -> None:
    """Replace `obj.method` by a wrapper that counts its calls and the seconds inside them
    under `seen[key]` = [calls, seconds] (`seen` a `defaultdict(lambda: [0, 0.0])`)."""
    inner = getattr(obj, method)

    def counted(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = inner(*args, **kwargs)
        seen[key][0] += 1
        seen[key][1] += time.perf_counter() - t0
        return out

    setattr(obj, method, counted)
