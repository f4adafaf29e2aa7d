"""The tool-calling suites' names and defaults, light enough for `specguard bench --help`."""

from __future__ import annotations

SUITES: tuple[str, ...] = ("reasoning", "bfcl", "agents")
BFCL_METHODS: tuple[str, ...] = ("target", "draft", "token-sd", "specguard-balanced",
                                 "specguard-fast")
AGENT_METHODS: tuple[str, ...] = ("target", "token-sd", "specguard-balanced")
FRAMEWORKS: tuple[str, ...] = ("langchain", "llama_index")
# what the agents suite asks: the GSM8K question, or its worked answer as one expression
AGENT_TASKS: tuple[str, ...] = ("problem", "expression")
# new-token caps per model call: a tool call (or several) after some reasoning
DEFAULT_MAX_NEW_TOKENS: dict[str, int] = {"bfcl": 512, "agents": 512}
