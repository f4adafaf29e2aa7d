"""The engine a `ChatSpecGuard` runs on, and its token counting.

`EngineOwner` is mixed into `ChatSpecGuard` (`chat_model`, which declares the fields it reads):
the injected engine, or the draft/target pair loaded once on first use with the loader options;
and the target's tokenizer for LangChain's token counts, read from local files only (never the
hub) so that counting never loads weights.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from specguard_core import EngineConfig, SpecGuardConfig, SpecGuardEngine
from specguard_core.models.options import LoadOptions
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from specguard_integrations.common import base_config, load_options, load_pair, tokenizer_refs
from specguard_integrations.langchain.convert import to_engine_message


class EngineOwner:
    """`engine` (injected, or loaded on first use), the loader options and the token counts."""

    if TYPE_CHECKING:  # fields and private attributes of ChatSpecGuard
        injected_engine: SpecGuardEngine | None
        model: str | None
        draft: str | None
        config: SpecGuardConfig | None
        preset: str | None
        engine_config: EngineConfig | None
        chat_template_kwargs: dict[str, Any] | None
        custom_get_token_ids: Callable[[str], list[int]] | None
        _loaded: SpecGuardEngine | None
        _tokenizer: Any
        _lock: Any

    @property
    def loading(self) -> LoadOptions:
        """The loader options: `load_options`, else the separate loader fields given."""
        return load_options(self, "ChatSpecGuard")

    @property
    def engine(self) -> SpecGuardEngine:
        """The injected engine, or the pair loaded on first use (once, thread-safe)."""
        if self.injected_engine is not None:
            return self.injected_engine
        with self._lock:
            if self._loaded is None:
                base = base_config(self.config, self.preset, None)
                self._loaded = load_pair(self.draft or DEFAULT_DRAFT, self.model or DEFAULT_TARGET,
                                         base, self.loading, self.engine_config)
            return self._loaded

    def get_engine(self) -> SpecGuardEngine:
        """Deprecated: use the `engine` property."""
        warnings.warn("ChatSpecGuard.get_engine() is deprecated; use .engine", DeprecationWarning,
                      stacklevel=2)
        return self.engine

    def _local_tokenizer(self) -> Any:
        """The target's tokenizer: the loaded engine's, else read from the local folder without
        loading weights. Never the hub: an uncached pair is a clear error."""
        engine = self.injected_engine or self._loaded
        if engine is not None:
            return engine.tokenizer
        if self._tokenizer is None:
            from specguard_core.models.loading import local_tokenizer

            ref, load = self.model or DEFAULT_TARGET, self.loading
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
