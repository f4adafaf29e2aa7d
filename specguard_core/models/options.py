"""`LoadOptions`: how a draft/target pair is loaded, declared once.

`SpecGuardEngine.from_pretrained(draft, target, load=LoadOptions(...))`, its keyword arguments,
the adapters' `load_options=` and every command's loading flags (generated from these fields by
`specguard_core.flags`) are this one model. Importing it loads no torch: devices and dtypes are
checked against torch only when an instance is built.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from specguard_core.flags import ModelFlags, flag_name

DType = Literal["auto", "bfloat16", "float16", "float32"]
DTYPES: tuple[str, ...] = get_args(DType)
Backend = Literal["transformers", "llama.cpp"]
BACKENDS: tuple[str, ...] = get_args(Backend)
# what only the transformers backend reads (the llama.cpp backend refuses them when set)
TRANSFORMERS_ONLY = ("dtype", "draft_dtype", "target_dtype", "device_map", "max_memory",
                     "revision", "trust_remote_code", "quantize", "quantization_config")
SERVED = ("target_url", "target_model", "target_tokenizer", "target_timeout", "target_api_key",
          "target_top_logprobs")
TARGET_KEY_ENV = "SPECGUARD_TARGET_API_KEY"  # the commands' default for target_api_key


def _metavar(metavar: str) -> dict[str, Any]:
    """A field's name for its value in the command-line help (`specguard_core.flags`)."""
    return {"metavar": metavar}


def check_device(device: str) -> str:
    """`device` if torch can name it (`auto` too), else a ValueError saying what to pass. Whether
    the device exists on this machine is checked when a model loads (`resolve_device`)."""
    if device == "auto":
        return device
    import torch

    try:
        torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        hint = " (did you mean cuda?)" if str(device).lower().startswith("gpu") else ""
        raise ValueError(f"unknown device {device!r}{hint}; use auto, cpu, cuda or cuda:N") from None
    return device


def check_dtype(dtype: Any) -> str:
    """A dtype's name (`torch.bfloat16` -> "bfloat16"), or a ValueError listing the choices."""
    name = str(dtype).removeprefix("torch.") if type(dtype).__name__ == "dtype" else dtype
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use {', '.join(DTYPES)}")
    return str(name)


class LoadOptions(BaseModel):
    """Every option of loading a pair: where and how the in-process models load (shared, or per
    model: `draft_*` / `target_*` override `device` / `dtype` for one model), what transformers is
    passed, and a target served by vLLM instead of an in-process one (`target_url` and its
    `target_*` options). Immutable; `merged(**changes)` returns a validated copy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Backend = Field("transformers", description="what runs the in-process models: "
                             "transformers (CPU or GPU; every verifier signal) or llama.cpp "
                             "(GGUF files on the CPU through llama-cpp-python, extra [llamacpp], "
                             "with torch's thread count: logits and the final hidden state, no "
                             "attention rows or middle layers)")
    context_size: int = Field(0, ge=0, json_schema_extra=_metavar("TOKENS"), description="llama.cpp: "
                              "KV-cache cells per model, shared by the requests in flight (0: the "
                              "model's context window)")
    device: str = Field("auto", json_schema_extra=_metavar("DEVICE"), description="device of both "
                        "models: auto (a CUDA GPU when one is visible, else the CPU), cpu, cuda, "
                        "cuda:N, mps")
    dtype: DType = Field("auto", description="dtype of both models' weights (auto: as the model's "
                         "config says)")
    draft_device: str | None = Field(None, json_schema_extra=_metavar("DEVICE"),
                                     description="device of the draft only (overrides device)")
    target_device: str | None = Field(None, json_schema_extra=_metavar("DEVICE"),
                                      description="device of the target only (overrides device)")
    draft_dtype: DType | None = Field(None, description="dtype of the draft only (overrides dtype)")
    target_dtype: DType | None = Field(None, description="dtype of the target only (overrides "
                                       "dtype)")
    device_map: str | dict[str, Any] | None = Field(
        None, json_schema_extra=_metavar("MAP"), description='transformers\' device_map for both '
        'models, e.g. "auto" (needs accelerate), or a JSON object of module names to devices')
    max_memory: dict[int | str, int | str] | None = Field(
        None, description='memory cap per device with device_map, e.g. {"0": "20GiB", "cpu": '
        '"64GiB"}')
    revision: str | None = Field(None, json_schema_extra=_metavar("REV"), description="model "
                                 "revision (branch, tag or commit) for hub ids")
    trust_remote_code: bool = Field(False, description="let transformers run Python code shipped "
                                    "in the model folders (off: such a model is refused)")
    quantize: Literal["4bit", "8bit"] | None = Field(
        None, description="load the in-process models quantized with bitsandbytes (CUDA); "
        "shorthand for a bitsandbytes quantization_config")
    quantization_config: Any = Field(
        None, description="transformers' quantization config for both models: a config object, "
        'or a JSON object with its quant_method, e.g. {"quant_method": "bitsandbytes", '
        '"load_in_4bit": true}')
    target_url: str | None = Field(None, json_schema_extra=_metavar("URL"), description="the "
                                   "target's OpenAI-compatible API on a vLLM server, e.g. "
                                   "http://HOST:8000/v1 (replaces the in-process target; the "
                                   "draft still loads here)")
    target_model: str | None = Field(None, json_schema_extra=_metavar("NAME"), description="the "
                                     "served target's model name (default: the only one the "
                                     "server serves)")
    target_tokenizer: str | None = Field(None, json_schema_extra=_metavar("PATH"), description=""
                                         "local folder (or cached name) of the served target's "
                                         "tokenizer (default: the served name if cached, else "
                                         "the draft's)")
    target_timeout: float = Field(120.0, gt=0, json_schema_extra=_metavar("SECONDS"),
                                  description="seconds to wait for each answer of the target's "
                                  "server")
    target_api_key: SecretStr | None = Field(None, json_schema_extra=_metavar("KEY"),
                                             description="the target server's API key")
    target_top_logprobs: int = Field(20, ge=1, json_schema_extra=_metavar("N"), description="log-"
                                     "probabilities the target's server returns per token (its "
                                     "--max-logprobs must allow them)")

    @field_validator("device", "draft_device", "target_device", mode="before")
    @classmethod
    def _device(cls, value: Any) -> Any:
        return value if value is None else check_device(str(value))

    @field_validator("dtype", "draft_dtype", "target_dtype", mode="before")
    @classmethod
    def _dtype(cls, value: Any) -> Any:
        return value if value is None else check_dtype(value)

    @field_validator("max_memory", mode="before")
    @classmethod
    def _device_numbers(cls, value: Any) -> Any:
        """GPU indices given as text (JSON keys: "0") are numbers, as transformers expects."""
        if isinstance(value, dict):
            return {int(k) if str(k).isdigit() else k: v for k, v in value.items()}
        return value

    @field_validator("target_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not a URL; give the server's API as "
                             "http://HOST:PORT/v1")
        return value

    @model_validator(mode="after")
    def _one_quantization(self) -> LoadOptions:
        if self.quantize is not None and self.quantization_config is not None:
            raise ValueError("pass quantize or quantization_config, not both")
        if self.backend == "llama.cpp":
            if served := sorted(set(SERVED) & self.model_fields_set):
                raise ValueError(f"{', '.join(served)} names a target on a vLLM server, which "
                                 "the llama.cpp backend does not reach: load both models on "
                                 "llama.cpp, or use the transformers backend with a served target")
            if given := sorted(set(TRANSFORMERS_ONLY) & self.model_fields_set):
                raise ValueError(f"{', '.join(given)} applies to the transformers backend; the "
                                 "llama.cpp backend runs a GGUF file as it is quantized")
            devices = [d for d in (self.device, self.draft_device, self.target_device)
                       if d not in (None, "auto", "cpu")]
            if devices:
                raise ValueError(f"the llama.cpp backend runs on the CPU here; device "
                                 f"{devices[0]!r} needs --backend transformers")
        elif self.context_size:
            raise ValueError("context_size applies to the llama.cpp backend (--backend "
                             "llama.cpp); transformers caches what each request needs")
        return self

    @classmethod
    def of(cls, **options: Any) -> LoadOptions:
        """`LoadOptions(**options)` whose errors are one line naming each option and its value
        (`draft_dtype='bf16': unknown dtype ...`; an unknown name lists the valid ones)."""
        try:
            return cls(**options)
        except ValidationError as err:
            problem = problems(err)
        raise ValueError(problem)  # outside the except: the line is already the whole message

    def merged(self, **changes: Any) -> LoadOptions:
        """A validated copy with `changes` applied (errors as `of`)."""
        given = {k: getattr(self, k) for k in self.model_fields_set}
        return self.of(**{**given, **changes}) if changes else self

    def placement(self, role: Literal["draft", "target"]) -> dict[str, Any]:
        """`{"device": ..., "dtype": ...}` of the `role` model: its own option where set, else
        the shared one."""
        own_device, own_dtype = getattr(self, f"{role}_device"), getattr(self, f"{role}_dtype")
        return {"device": self.device if own_device is None else own_device,
                "dtype": self.dtype if own_dtype is None else own_dtype}

    def quantization(self) -> Any:
        """What transformers' `quantization_config` gets: `quantization_config`, or a
        `BitsAndBytesConfig` for `quantize`, or None."""
        if self.quantize is None:
            return self.quantization_config
        from transformers import BitsAndBytesConfig

        return BitsAndBytesConfig(load_in_4bit=self.quantize == "4bit",
                                  load_in_8bit=self.quantize == "8bit")

    def in_process(self) -> LoadOptions:
        """These options without the served target's (`target_url`, `target_*`)."""
        return LoadOptions(**{k: getattr(self, k) for k in self.model_fields_set
                              if k not in SERVED})

    def served(self) -> dict[str, Any]:
        """The served target's options that were set, as keywords (the API key unwrapped)."""
        out = {k: getattr(self, k) for k in SERVED if k in self.model_fields_set}
        if isinstance(out.get("target_api_key"), SecretStr):
            out["target_api_key"] = out["target_api_key"].get_secret_value()
        return out


def problems(err: ValidationError) -> str:
    """A validation error as one line: `name=value: problem` for each (an unknown name lists the
    valid options)."""
    parts = []
    for e in err.errors():
        name = ".".join(str(p) for p in e["loc"])
        msg = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown loader option {name!r}; valid: {sorted(LoadOptions.model_fields)}")
        else:
            parts.append(f"{name}={e.get('input')!r}: {msg}" if name else msg)
    return "; ".join(parts)


class LoadFlags(ModelFlags[LoadOptions]):
    """The loading flags of `specguard run`, `serve` and `bench`, generated from `LoadOptions`:
    `add` puts the in-process ones in a "loading" group and, with `served=`, the served target's
    in a group of that title. `target_api_key` defaults to $SPECGUARD_TARGET_API_KEY."""

    def __init__(self, defaults: Mapping[str, Any] | None = None,
                 default_help: Mapping[str, str] | None = None) -> None:
        super().__init__(LoadOptions, defaults=defaults, default_help=default_help,
                         env={"target_api_key": TARGET_KEY_ENV})

    def add_groups(self, parser: argparse.ArgumentParser, served: str | None = None) -> None:
        """The "loading" group, and the served target's group titled `served` (none: the
        command runs in-process models only)."""
        self.add(parser.add_argument_group("loading"),
                 [n for n in self.fields if n not in SERVED])
        if served is not None:
            self.add(parser.add_argument_group(served), SERVED)

    def values(self, args: argparse.Namespace) -> dict[str, Any]:
        """The command's defaults with what was given over them; on `--backend llama.cpp` the
        command's transformers defaults (its `--dtype`) do not apply."""
        values = super().values(args)
        if values.get("backend") == "llama.cpp":
            given = self.given(args)
            values = {k: v for k, v in values.items() if k not in TRANSFORMERS_ONLY or k in given}
        return values

    def parse(self, args: argparse.Namespace) -> LoadOptions:
        """The options of the parsed flags; a served target's flag without --target-url, or a
        bad value, is a ValueError naming the flag."""
        given = self.given(args)
        if "target_url" not in given and (
                stray := [flag_name(n) for n in SERVED if n in given]):
            raise ValueError(f"{', '.join(stray)} needs --target-url (a target on a vLLM server)")
        return super().parse(args)
