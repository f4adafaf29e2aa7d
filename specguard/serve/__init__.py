"""`specguard serve`: an OpenAI-compatible HTTP API (FastAPI + uvicorn) over one SpecGuardEngine.

One folder per concern, from the bottom (none imports a folder above it):
- `api`: OpenAI's wire format, pure functions: the request models and the error JSON (`protocol`;
  `checks`: a chat request's structured fields; `extension`: the knobs a client may set within
  the operator's `Limits`; `untrusted`: checks and scrubbing of untrusted text), responses and
  chunks as the `openai` SDK's own types checked for keys OpenAI's types do not have (`wire`),
  OpenAI <-> engine (`convert`) and stream chunks (`chunks`).
- `http`: what a client may send and how it is let in: `settings` (`ServeSettings`), `slots`
  (admission, running slots, leases), `guard` (Host, Origin, media type, body size), `errors`
  (what a client is told), `intake` (the key, the body), `metrics` (Prometheus).
- `running`: a request through the engine: `streaming` (responses that always encode; SSE not
  paced by the reader, kept alive, its unread events bounded), `generation`.
-> `app` (`create_app(engine, settings)`).
Needs the `serve` extra: `pip install -e '.[serve]' (from a checkout)`.
"""
