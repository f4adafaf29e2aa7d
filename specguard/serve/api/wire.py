"""The wire format: responses and stream chunks are the `openai` package's own types (built in
`convert.py` and `chunks.py`, so a wrong type fails there), and `dump` turns one into the JSON
object sent, after checking that it carries no key OpenAI's types do not know but the
extensions this server sends (`EXTRAS`).

OpenAI's types keep unknown keys (`extra="allow"`, in `model_extra`) rather than refuse them:
`unknown_keys` walks a built object for them. `dump` leaves out the fields that were not set
(`exclude_unset`), so a field set to None is sent as null and a field never set is absent.
"""

from __future__ import annotations

from typing import Any

from openai import BaseModel
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion_chunk import ChoiceDelta

Response = ChatCompletion | ChatCompletionChunk | Completion

_REASONING = frozenset({"reasoning", "reasoning_content"})  # vLLM's names, now and before
EXTRAS: dict[type[BaseModel], frozenset[str]] = {
    ChatCompletion: frozenset({"specguard"}),  # the SpecGuard trace
    ChatCompletionChunk: frozenset({"specguard"}),
    Completion: frozenset({"specguard"}),
    ChatCompletionMessage: _REASONING,
    ChoiceDelta: _REASONING,
}

_PLAIN = (str, int, float)


def unknown_keys(model: BaseModel, path: str = "$") -> list[str]:
    """The paths of the keys in `model` (and the models in it) that its OpenAI type does not have
    and `EXTRAS` does not allow, e.g. `$.choices[0].message.reasoning_tokens`."""
    extra = model.model_extra
    out = [f"{path}.{key}" for key in extra if key not in EXTRAS.get(type(model), ())] \
        if extra else []
    for name, value in vars(model).items():  # the declared fields (extras are kept apart)
        if value is None or isinstance(value, _PLAIN):  # cheaper than isinstance(BaseModel)
            continue
        if isinstance(value, BaseModel):
            out += unknown_keys(value, f"{path}.{name}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    out += unknown_keys(item, f"{path}.{name}[{i}]")
    return out


def dump(model: Response) -> dict[str, Any]:
    """The JSON object of a response or chunk: the fields set, None as null. Raises ValueError
    if it carries a key outside OpenAI's type and `EXTRAS` (a bug here, not the client's)."""
    if bad := unknown_keys(model):
        raise ValueError(f"{type(model).__name__} has keys OpenAI's type does not: {bad}")
    return model.model_dump(exclude_unset=True)
