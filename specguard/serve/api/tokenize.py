"""vLLM's tokenizer endpoints' bodies (`/tokenize`, `/detokenize`): a text (tokenized as a
completion prompt) or a conversation (rendered with the chat template, as a chat request), and
token ids back to text. Pure: `app.py` answers them with the served engine's target tokenizer."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from specguard.serve.api.protocol import ChatMessage, continuation


class TokenizeRequest(BaseModel):
    """POST /tokenize: `prompt` (a completion's text) or `messages` (a chat, rendered as
    /v1/chat/completions renders it), exactly one."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[dict[str, Any]] | None = None
    add_special_tokens: bool | None = None  # a text's BOS (true by default, as vLLM)
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    chat_template_kwargs: Any = None
    return_token_strs: bool = False

    def problems(self) -> list[tuple[str, str]]:
        if (self.prompt is None) == (self.messages is None):
            return [("prompt", "send a prompt (text) or messages (a chat), exactly one")]
        if self.prompt is not None and (self.tools or self.chat_template_kwargs is not None or
                                        self.continue_final_message is not None or
                                        self.add_generation_prompt is not None):
            return [("prompt", "a text prompt is not rendered with the chat template: tools, "
                               "chat_template_kwargs and the chat flags go with messages")]
        if self.messages is not None and self.add_special_tokens:
            return [("add_special_tokens", "a chat is tokenized as rendered (the template adds "
                                           "its special tokens); leave add_special_tokens unset")]
        return []

    def continuation(self) -> bool | None:
        return continuation(self.continue_final_message, self.add_generation_prompt)


class DetokenizeRequest(BaseModel):
    """POST /detokenize: token ids of the served model's vocabulary."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    tokens: list[StrictInt] = Field(max_length=1 << 20)
