"""OpenAI's wire format as the server speaks it: request bodies in (validated, within the
operator's `Limits`), responses, stream chunks and error bodies out. Pure functions, no HTTP; it
imports nothing else of `specguard.serve`.

`untrusted` (checks and scrubbing of untrusted text) -> `checks` (a chat request's structured
fields), `extension` (the `specguard` knobs a client may set, and `Limits`) -> `protocol` (request
models, the error JSON) -> `convert` (OpenAI <-> engine) -> `chunks` (engine steps -> stream
chunks, through `wire`: the `openai` SDK's types, checked for keys OpenAI's types do not have).
"""
