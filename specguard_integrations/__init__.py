"""Thin adapters over `specguard_core.SpecGuardEngine` (imported lazily, so neither LangChain nor
LlamaIndex is loaded until its adapter is used).

- `ChatSpecGuard` (`langchain/`): a LangChain `BaseChatModel` (from a checkout:
  `pip install -e ".[langchain]"`).
- `SpecGuardLLM` (`llama_index/`): a LlamaIndex `FunctionCallingLLM` (`pip install -e ".[llamaindex]"`).

What both share imports neither framework: `common` (the constructor vocabulary, the per-call
config, the model facts), `engines` (the engine an adapter owns, and the process-wide registry of
loaded pairs it comes from) and `fields` (the knob and loader fields and their descriptions).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ChatSpecGuard", "SpecGuardLLM"]


def __getattr__(name: str) -> Any:
    if name == "ChatSpecGuard":
        try:
            from specguard_integrations.langchain import ChatSpecGuard
        except ModuleNotFoundError as err:
            if not (err.name or "").startswith("langchain"):
                raise
            raise ImportError("ChatSpecGuard needs LangChain; from a SpecGuard checkout install "
                              "it with `pip install -e \".[langchain]\"`") from err
        return ChatSpecGuard
    if name == "SpecGuardLLM":
        from specguard_integrations.llama_index import SpecGuardLLM

        return SpecGuardLLM
    raise AttributeError(name)
