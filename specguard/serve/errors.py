"""How the server words its errors: a validation error names the field and the rule, never the
value sent; a failed generation's details (paths, internal model names, a target URL's
credentials) go to the log, not to the client."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from specguard.serve.extension import SpecGuardExtension
from specguard.serve.slots import APIError
from specguard.serve.untrusted import redact
from specguard_core.config import EXPERIMENTAL, EngineConfig, SpecGuardConfig
from specguard_core.remote.http import RemoteTargetError
from specguard_core.text.chat import InputError

log = logging.getLogger("specguard.serve")


def validation_message(err: ValidationError) -> tuple[str, str | None]:
    """The first problem, naming the field and the rule, never the value sent."""
    first = err.errors()[0]
    loc = [str(p)[:64] for p in first.get("loc", ())]
    param = ".".join(loc) or None
    if loc[:1] == ["specguard"] and len(loc) > 1:
        return _extension_message(loc, first.get("type")) or f"{param}: {first.get('msg')}", \
            "specguard"
    if first.get("type") == "extra_forbidden":
        return f"Unrecognized request argument supplied: {param}", param
    if first.get("type") == "missing":
        return f"Missing required parameter: {param!r}", param
    return f"{param}: {first.get('msg')}", param


def _extension_message(loc: list[str], kind: Any) -> str | None:
    if kind != "extra_forbidden":
        return None
    name, where = loc[-1], ".".join(loc)
    if name in EngineConfig.model_fields:
        return f"{where} is an engine setting, fixed when the server starts; a request cannot set it"
    if name in SpecGuardConfig.model_fields or name in EXPERIMENTAL:
        return (f"{where} is the server operator's (`specguard serve --set`): a request may not "
                "name models, paths or loader options")
    return f"{where} is not a SpecGuard knob; a request may set {sorted(SpecGuardExtension.model_fields)}"


def failure(err: Exception) -> APIError:
    """A failed generation as the client sees it: bad input a 400 with its message; a served
    target's failure a 502, anything else a 500, both without details (they are logged)."""
    if isinstance(err, InputError):
        return APIError(400, str(err))
    if isinstance(err, RemoteTargetError):
        log.error("the target model's server failed: %s", redact(str(err)))
        return APIError(502, "generation failed: the target model's server could not be used "
                        "(unreachable, timed out or failed); the server's log has the details",
                        "server_error")
    log.error("generation failed: %s", redact(f"{type(err).__name__}: {err}"))
    return APIError(500, f"generation failed ({type(err).__name__}); the server's log has the "
                    "details", "server_error")
