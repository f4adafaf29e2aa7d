"""Running an admitted request through the engine and answering it: one JSON body, or an SSE stream
whose engine work the reader does not pace. Above `api` and `http`; `app` sits above it.

`streaming` (responses that always encode; `Relay`, its unread events bounded by `Buffers`;
`EventStream`) -> `generation` (`Generation`: admit, open the engine's streams, wait for a slot,
iterate the steps on a worker thread).
"""
