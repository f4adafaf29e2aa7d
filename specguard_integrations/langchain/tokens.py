"""`ChatSpecGuard`'s token counts, with the target's own tokenizer.

`TokenCounts` (an `EngineOwner`) is mixed into `ChatSpecGuard` (`chat_model`, which declares the
fields it reads): the target's tokenizer for LangChain's token counts, the engine's when it is
loaded, else read from local files only (never the hub), so that counting never loads weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from specguard_integrations.common import tokenizer_refs
from specguard_integrations.engines import EngineOwner
from specguard_integrations.langchain.convert import to_engine_message


class TokenCounts(EngineOwner):
    """`get_token_ids` and `get_num_tokens_from_messages` with the target's local tokenizer."""

    if TYPE_CHECKING:  # fields and private attributes of ChatSpecGuard
        chat_template_kwargs: dict[str, Any] | None
        custom_get_token_ids: Callable[[str], list[int]] | None
        _tokenizer: Any

    def _local_tokenizer(self) -> Any:
        """The target's tokenizer: the engine's, else read from the local folder without
        loading weights. Never the hub: an uncached pair is a clear error."""
        engine = self._ready_engine()
        if engine is not None:
            return engine.tokenizer
        if self._tokenizer is None:
            from specguard_core.models.loading import local_tokenizer

            ref, load = self.target or DEFAULT_TARGET, self.loading
            refs = tokenizer_refs(ref, self.draft or DEFAULT_DRAFT, load.target_tokenizer,
                                  load.target_model)
            for i, name in enumerate(refs):
                try:  # files on disk only: never a request to the hub, not even a lookup
                    self._tokenizer = local_tokenizer(name, revision=load.revision,
                                                      trust_remote_code=load.trust_remote_code)
                    break
                except (OSError, ValueError) as err:
                    if i == len(refs) - 1:
                        raise ValueError(
                            f"ChatSpecGuard counts tokens with the target's own tokenizer, and "
                            f"{name!r} is not available locally (it is never fetched for "
                            "counting). Run `specguard models fetch`, pass a local folder, or "
                            "pass custom_get_token_ids=") from err
        return self._tokenizer

    def get_token_ids(self, text: str) -> list[int]:
        """Token ids from the target's local tokenizer (never the hub)."""
        if self.custom_get_token_ids is not None:
            return self.custom_get_token_ids(text)
        return list(self._local_tokenizer()(text, add_special_tokens=False)["input_ids"])

    def get_num_tokens_from_messages(self, messages: list[BaseMessage],
                                     tools: Sequence[Any] | None = None) -> int:
        """Prompt tokens as the chat template renders the conversation (and tools)."""
        from specguard_core.text.chat import check_tools, normalise_messages, render_prompt

        tokenizer = self._local_tokenizer()
        text = render_prompt(tokenizer, normalise_messages([to_engine_message(m)
                                                            for m in messages]),
                             check_tools([convert_to_openai_tool(t) for t in tools or []]),
                             self.chat_template_kwargs)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])
