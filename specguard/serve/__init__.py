"""`specguard serve`: an OpenAI-compatible HTTP API (FastAPI + uvicorn) over one SpecGuardEngine.

`protocol` (request models, error JSON) -> `convert` (OpenAI <-> engine, pure), `slots`
(admission, running slots, leases) -> `app` (`create_app(engine, settings)`).
Needs the `serve` extra: `pip install 'specguard[serve]'`.
"""
