"""`specguard serve`: an OpenAI-compatible HTTP API (FastAPI + uvicorn) over one SpecGuardEngine.

`protocol` (request models, error JSON; `checks`: a chat request's structured fields;
`extension`: the knobs a client may set within the operator's `Limits`; `untrusted`: checks and
scrubbing of untrusted text), `wire` (responses and chunks as the `openai` SDK's own types, checked
for keys OpenAI's types do not have) -> `convert` (OpenAI <-> engine, pure), `chunks` (stream
chunks), `slots` (admission, running slots, leases), `streaming` (responses that always encode;
SSE not paced by the reader, kept alive, its unread events bounded), `guard` (Host, Origin, media
type, body size), `errors` (what a client is told), `metrics` (Prometheus) -> `settings`
(`ServeSettings`), `intake` (the key, the body), `generation` (a request through the engine)
-> `app` (`create_app(engine, settings)`).
Needs the `serve` extra: `pip install -e '.[serve]' (from a checkout)`.
"""
