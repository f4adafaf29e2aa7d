"""Thin adapters over `specguard_core.SpecGuardEngine` (imported lazily, so neither LangChain nor
LlamaIndex is loaded until its adapter is used).

- `ChatSpecGuard`: a LangChain `BaseChatModel` (extra `specguard[langchain]`).
- `SpecGuardLLM`: a LlamaIndex `FunctionCallingLLM` (extra `specguard[llamaindex]`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ChatSpecGuard", "SpecGuardLLM"]


def __getattr__(name: str) -> Any:
    if name == "ChatSpecGuard":
        from specguard_integrations.langchain import ChatSpecGuard

        return ChatSpecGuard
    if name == "SpecGuardLLM":
        from specguard_integrations.llama_index import SpecGuardLLM

        return SpecGuardLLM
    raise AttributeError(name)
