"""`SpecGuardLLM`'s tool hooks, as LlamaIndex's `FunctionCallingLLM` calls them.

`ToolCalls` is mixed into `SpecGuardLLM` (`llm`): `chat_with_tools` and the agents build their
`chat` arguments with `_prepare_chat_with_tools` (OpenAI tool dicts through LlamaIndex's own
`to_openai_tool`, and the engine's tool choice), trim a response to one tool call unless parallel
calls are allowed, and read the calls back as `ToolSelection`s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole, ToolCallBlock
from llama_index.core.llms.llm import ToolSelection

from specguard_integrations.llama_index.convert import tool_selections

if TYPE_CHECKING:
    from llama_index.core.tools.types import BaseTool


class ToolCalls:
    """`FunctionCallingLLM`'s tool hooks over `chat`'s tools and tool_choice options."""

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        tool_choice: str | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """`chat` arguments: messages, OpenAI tool dicts, the engine's tool choice, and whether
        the reply may hold more than one call (else it ends with its first)."""
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            user_msg = ChatMessage(role=MessageRole.USER, content=user_msg)
        if user_msg is not None:
            messages.append(user_msg)
        specs = [t.metadata.to_openai_tool(skip_length_check=True) for t in tools]
        if tool_choice is None:
            tool_choice = "required" if tool_required else "auto"
        return {"messages": messages, "tools": specs or None, "tool_choice": tool_choice,
                "parallel_tool_calls": allow_parallel_tool_calls, **kwargs}

    def _validate_chat_with_tools_response(
        self,
        response: ChatResponse,
        tools: Sequence[BaseTool],
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        """Keep only the first tool call unless parallel calls are allowed."""
        message = response.message
        calls = [b for b in message.blocks if isinstance(b, ToolCallBlock)]
        if not allow_parallel_tool_calls and len(calls) > 1:
            message.blocks = [b for b in message.blocks if not isinstance(b, ToolCallBlock)]
            message.blocks.append(calls[0])
            legacy = message.additional_kwargs.get("tool_calls")
            if legacy:
                message.additional_kwargs["tool_calls"] = legacy[:1]
        return response

    def get_tool_calls_from_response(
        self,
        response: ChatResponse,
        error_on_no_tool_call: bool = True,
        **kwargs: Any,
    ) -> list[ToolSelection]:
        calls = tool_selections(response.message)
        if not calls and error_on_no_tool_call:
            raise ValueError("expected at least one tool call in the response, but it has none")
        return calls
