"""The HTTP layer: the operator's settings and what a client must pass before its request runs
(middlewares, the API key, the body, admission to a slot), the errors it is told and the metrics.
Imports `specguard.serve.api`, never `running`.

`settings` (`ServeSettings`), `slots` (admission, running slots, leases, `APIError`) -> `guard`
(Host, Origin, media type, body size), `metrics` (Prometheus), `errors` (what a client is told)
-> `intake` (the key, the body).
"""
