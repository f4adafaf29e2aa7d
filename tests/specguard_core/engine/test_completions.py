"""Raw prompts, assistant prefill, the prompt scored by the target and the count penalties,
through the engine's API on tiny random models and scripted ones."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from specguard_core import RawPrompt, SpecGuardConfig, SpecGuardEngine
from specguard_core.testing import QWEN_STYLE_TEMPLATE, scripted_engine
from specguard_core.text.chat import InputError
from tests.fixtures import on_device
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair
from tests.specguard_core.engine.test_engine import GREEDY, all_ids

HEADER = "<|im_start|>user\nGo<|im_end|>\n<|im_start|>assistant\n"
REPLY = "Seven.\n\nForty-two."


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, device: str) -> SpecGuardEngine:
    pair = on_device(noisy_copy_pair(tmp_path_factory.mktemp(f"raw-{device}")), device)
    return SpecGuardEngine(*pair, config=SpecGuardConfig(**GREEDY, fallback="speculative"))


def _forward_logprobs(model: Any, ids: list[int]) -> torch.Tensor:
    """`[P, V]` log-probabilities from one plain forward over `ids`."""
    with torch.no_grad():
        logits = model(torch.tensor([ids], device=model.device)).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


def _greedy(model: Any, prompt: list[int], n: int, presence: float = 0.0,
            frequency: float = 0.0) -> list[int]:
    """The model's greedy continuation with vLLM's count penalties on the reply's tokens."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids], device=model.device)).logits[0, -1].float()
            counts = torch.bincount(torch.tensor(ids[len(prompt):], dtype=torch.long),
                                    minlength=logits.shape[-1]).float().to(logits.device)
            logits = logits - frequency * counts - presence * (counts > 0).float()
            ids.append(int(logits.argmax()))
            if ids[-1] == model.generation_config.eos_token_id:
                break
    return ids[len(prompt):]


def test_prompt_ids_reads_the_target_alone(engine: SpecGuardEngine,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`engine.prompt_ids` (token counting, /tokenize) renders and encodes for the target only."""
    text, raw = "Count: a a a a", RawPrompt("Count: a a a a")
    want = (engine.prompt_ids(text), engine.prompt_ids(raw))

    def untouched(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the draft's tokenizer was used")

    monkeypatch.setattr(engine.draft, "encode", untouched)
    assert (engine.prompt_ids(text), engine.prompt_ids(raw)) == want
    assert want[0] == engine.target.encode(engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True))


def test_a_raw_prompt_is_continued_as_it_is(engine: SpecGuardEngine) -> None:
    text = "The capital of France is"
    want = engine.target.tokenizer(text, add_special_tokens=True)["input_ids"]
    out = engine.generate(RawPrompt(text), tau=math.inf)
    assert out.usage.prompt_tokens == len(want) < len(engine.prompt_ids(text))
    assert engine.prompt_ids(RawPrompt(text)) == want
    assert all_ids(out)[:8] == _greedy(engine.target.model, want, 8)  # the target's continuation
    by_ids = engine.generate(RawPrompt(token_ids=tuple(want)), tau=math.inf)
    assert all_ids(by_ids) == all_ids(out) and by_ids.raw_text == out.raw_text


def test_prompt_logprobs_come_from_one_target_pass(engine: SpecGuardEngine) -> None:
    ids = engine.target.tokenizer("One two three four five", add_special_tokens=False)[
        "input_ids"]
    passes = engine.target.model
    ref = _forward_logprobs(passes, ids)  # [P, V]
    out = engine.generate(RawPrompt(token_ids=tuple(ids)), prompt_logprobs=True, top_logprobs=3,
                          tau=math.inf)
    scored = out.prompt_logprobs
    assert scored is not None and scored.token_ids == ids and scored.logprobs[0] is None
    want = [float(ref[i - 1, t]) for i, t in enumerate(ids) if i]
    assert scored.logprobs[1:] == pytest.approx(want, abs=1e-4)
    assert [[i for i, _ in top] for top in scored.top[1:]] == \
        ref[:-1].topk(3, dim=-1).indices.tolist()
    assert out.stats.target.prefilled + out.stats.target.tentative >= len(ids)
    only = engine.generate(RawPrompt(token_ids=tuple(ids)), prompt_logprobs="only")
    assert only.steps == [] and only.finish_reason == "length" and only.usage.completion_tokens == 0
    assert only.prompt_logprobs is not None
    assert only.prompt_logprobs.logprobs == pytest.approx(scored.logprobs)
    assert only.stats.target.forward_calls == 1 and only.stats.draft.forward_calls == 0


def test_the_count_penalties_shape_draft_and_target_alike(engine: SpecGuardEngine) -> None:
    """Greedy with presence and frequency penalties: the target alone (tau=+inf, speculative
    fallback: the draft's tokens verified against the penalised target) and the draft alone
    (tau=-inf) each write what a plain greedy loop with vLLM's penalties writes."""
    prompt = engine.prompt_ids("Count: a a a a")
    knobs = dict(presence_penalty=1.5, frequency_penalty=0.7)
    want = _greedy(engine.target.model, prompt, 48, **{"presence": 1.5, "frequency": 0.7})
    assert want != _greedy(engine.target.model, prompt, 48)  # the penalties change the text
    assert all_ids(engine.generate("Count: a a a a", tau=math.inf, **knobs)) == want
    assert all_ids(engine.generate("Count: a a a a", tau=-math.inf, **knobs)) == \
        _greedy(engine.draft.model, prompt, 48, presence=1.5, frequency=0.7)


def test_an_assistant_prefill_is_continued() -> None:
    engine = scripted_engine(lambda p: REPLY)
    go = [{"role": "user", "content": "Go"}]
    cont = engine.generate([*go, {"role": "assistant", "content": "Seven."}])
    assert cont.raw_text == "\n\nForty-two." and cont.text == "Forty-two."
    fresh = engine.generate([*go, {"role": "assistant", "content": "Seven."}],
                            continue_final_message=False)
    assert fresh.raw_text == REPLY  # the message was closed, a new turn written
    assert engine.generate(go).raw_text == REPLY
    with pytest.raises(InputError, match="continue_final_message"):
        engine.generate(go, continue_final_message=True)
    prompt = engine.prompt_ids([*go, {"role": "assistant", "content": "Seven."}])
    assert engine.tokenizer.decode(prompt).endswith("assistant\nSeven.")


def test_a_prefill_inside_a_think_block_stays_reasoning() -> None:
    engine = scripted_engine(lambda p: "<think>\nAdd.\n\nThen multiply.\n</think>\n\nIt is 42.")
    out = engine.generate([{"role": "user", "content": "Go"},
                           {"role": "assistant", "content": "<think>\nAdd."}])
    assert out.text == "It is 42." and out.reasoning == "Then multiply."


def test_raw_prompts_refuse_what_needs_the_template() -> None:
    engine = scripted_engine(lambda p: REPLY)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(InputError, match="raw prompt"):
        engine.generate(RawPrompt(HEADER), tools=[tool])
    with pytest.raises(InputError, match="outside the vocabulary"):
        engine.generate(RawPrompt(token_ids=(1, 10**6)))
    with pytest.raises(InputError, match="empty"):
        RawPrompt("")
    with pytest.raises(InputError, match="exactly one"):
        RawPrompt("a", (1,))
    with pytest.raises(InputError, match="token ids"):
        RawPrompt(token_ids=(1, True))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="top_logprobs"):
        engine.generate("Go", top_logprobs=21)
    assert engine.generate(RawPrompt(HEADER)).raw_text == REPLY


def test_text_before_a_stop_string_keeps_its_spaces() -> None:
    engine = scripted_engine(lambda p: "Line 1 and Line 2")
    assert engine.generate("Go", stop=("2",)).text == "Line 1 and Line "
    assert engine.generate("Go").text == "Line 1 and Line 2"


def test_templates_without_prefill_support_fail_clearly() -> None:
    template = QWEN_STYLE_TEMPLATE.replace("{{ message.content or '' }}", "[hidden]")
    engine = scripted_engine(lambda p: REPLY)
    engine.tokenizer.chat_template = template
    with pytest.raises(InputError, match="chat template"):
        engine.generate([{"role": "user", "content": "Go"},
                         {"role": "assistant", "content": "Seven."}])
