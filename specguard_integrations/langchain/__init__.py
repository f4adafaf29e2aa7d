"""LangChain adapter: `ChatSpecGuard`, a `BaseChatModel` over `SpecGuardEngine` (from a checkout:
`pip install -e ".[langchain]"`).

Translation only: LangChain messages, tools and options go in as the engine's OpenAI-style inputs,
the engine's committed steps come out as `AIMessageChunk`s (one per step, with that step's source
and scores in `response_metadata["specguard_steps"]`). All of the algorithm lives in `specguard_core`.

- `chat_model`: `ChatSpecGuard`, its fields and LangChain's public surface (`bind_tools`,
  `with_structured_output`, token counts); the loader fields it shares with `SpecGuardLLM` are in
  `specguard_integrations.fields`, the vocabulary both adapters read in `specguard_integrations.common`,
  the engine it owns (injected, or the shared pair loaded on first use) in
  `specguard_integrations.engines`.
- `tokens`: token counts with the target's own tokenizer.
- `run`: one call, LangChain's `_generate` / `_stream` / `_agenerate` / `_astream` hooks.
- `structured`: `with_structured_output` over LangChain's parsers.
- `convert`: the pure message translation (messages and tools in, steps out as chunks);
  `normalise_tool_choice` and `to_engine_message` are exported here too.
- `errors`: `SpecGuardContextOverflowError`, a prompt over the context window as both the
  engine's `InputError` and LangChain's `ContextOverflowError` (exported here too).
"""

from __future__ import annotations

from specguard_integrations.langchain.chat_model import ChatSpecGuard
from specguard_integrations.langchain.convert import normalise_tool_choice, to_engine_message
from specguard_integrations.langchain.errors import SpecGuardContextOverflowError

__all__ = ["ChatSpecGuard", "SpecGuardContextOverflowError", "normalise_tool_choice",
           "to_engine_message"]
