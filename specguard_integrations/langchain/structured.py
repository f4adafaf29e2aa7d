"""`ChatSpecGuard.with_structured_output`: a bound chat model piped into LangChain's parsers.

`function_calling` forces a call of the schema's tool (verified against the schema like any tool
call); `json_schema` and `json_mode` bind a response format, so that every draft step of the JSON
answer is checked against it. With `include_raw`, the raw message, the parsed value and the parsing
error come back together, as ChatOpenAI's do.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.base import OutputParserLike
from langchain_core.output_parsers.openai_tools import (
    JsonOutputKeyToolsParser,
    PydanticToolsParser,
)
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass

from specguard_integrations.langchain.convert import response_format_for

Method = Literal["function_calling", "json_schema", "json_mode"]


def structured_output(model: BaseChatModel, schema: dict[str, Any] | type | None, method: Method,
                      include_raw: bool, strict: bool | None
                      ) -> Runnable[LanguageModelInput, dict[str, Any] | Any]:
    """`model` bound for `method`, piped into the parser of `schema` (a pydantic class: its
    instances; else dicts)."""
    if schema is None and method != "json_mode":
        raise ValueError(f"method={method!r} needs a schema")
    is_model = isinstance(schema, type) and is_basemodel_subclass(schema)
    fmt = {"kwargs": {"method": method, "strict": strict}, "schema": schema}
    llm: Runnable[LanguageModelInput, Any]
    parser: OutputParserLike[Any]
    if method == "function_calling":
        assert schema is not None
        name = convert_to_openai_tool(schema)["function"]["name"]
        llm = model.bind_tools([schema], tool_choice=name, strict=strict,
                               ls_structured_output_format=fmt)
        parser = (PydanticToolsParser(tools=[schema], first_tool_only=True) if is_model
                  else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True))
    elif method in ("json_schema", "json_mode"):
        llm = model.bind(response_format=response_format_for(schema, method, strict),
                         ls_structured_output_format=fmt)
        parser = (PydanticOutputParser(pydantic_object=schema) if is_model
                  else JsonOutputParser())
    else:
        raise ValueError(f"unknown method {method!r}; use function_calling, json_schema or "
                         "json_mode")
    if not include_raw:
        return llm | parser
    parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser,
                                        parsing_error=lambda _: None)
    fallback = RunnablePassthrough.assign(parsed=lambda _: None)
    return RunnableMap(raw=llm) | parsed.with_fallbacks([fallback],
                                                        exception_key="parsing_error")
