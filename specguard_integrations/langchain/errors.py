"""The engine's errors as LangChain's: a prompt that does not fit the context window is both the
engine's `PromptTooLong` (an `InputError`, a `ValueError`) and LangChain's `ContextOverflowError`,
as `langchain_openai` raises it for OpenAI's `context_length_exceeded`. So `SummarizationMiddleware`
trims the history and retries, and `ModelRetryMiddleware` does not retry the same request (a
`ModelError` that is not retryable)."""

from __future__ import annotations

from langchain_core.exceptions import ContextOverflowError

from specguard_core.text.errors import PromptTooLong


class SpecGuardContextOverflowError(PromptTooLong, ContextOverflowError):
    """The prompt does not fit the model's context window (with room for one more token)."""

    @classmethod
    def of(cls, err: PromptTooLong) -> SpecGuardContextOverflowError:
        return cls(err.prompt_tokens, err.context_window, err.model)
