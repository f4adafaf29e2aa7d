"""`ServeSettings`: the operator's knobs for one server (`specguard serve` flags), checked when
built: a combination that would open the server to every web page is a ValueError that says what
to do instead. No web stack is imported here (the CLI's parser reads the defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specguard.serve.api.extension import Limits

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})  # answered without an API key
DEFAULT_CORS_METHODS = ("GET", "POST")  # what the API uses; OPTIONS (preflight) always answered
DEFAULT_CORS_HEADERS = ("Authorization", "Content-Type")  # what an OpenAI client sends
DEFAULT_STREAM_BUFFER_BYTES = 128 << 20  # unread stream events kept for slow readers, all streams


@dataclass(frozen=True)
class ServeSettings:
    """Server knobs (the engine's per-request defaults stay in `engine.config`)."""

    api_key: str | None = None  # None: no authentication (and only loopback Host names)
    max_concurrent: int = 1  # requests iterating the engine at once
    max_queue: int = 16  # requests waiting for a slot; one more gets 503
    model_name: str | None = None  # the served model id; default: engine.model_name
    queue_poll_s: float = 0.5  # how often a queued request checks that its client is still there
    limits: Limits = field(default_factory=Limits)  # what a client may send and ask for
    allowed_hosts: tuple[str, ...] = ()  # Host names answered besides the loopback ones; with
    # an api_key and none given, any Host is answered
    allowed_origins: tuple[str, ...] = ()  # browser origins (scheme://host[:port]) allowed besides
    # the server's own: they pass the Origin check and get CORS headers; "*" is any origin (only
    # with an api_key, never with allow_credentials)
    allowed_methods: tuple[str, ...] = DEFAULT_CORS_METHODS  # CORS: methods a page may use ("*": all)
    allowed_headers: tuple[str, ...] = DEFAULT_CORS_HEADERS  # CORS: request headers a page may send
    allow_credentials: bool = False  # CORS: pages may send cookies (the API key is a header, not
    # a credential in CORS's sense; only a cookie-based proxy in front needs this)
    sse_keepalive_s: float = 10.0  # an SSE comment on every stream this often; 0: off
    max_stream_buffer_bytes: int = DEFAULT_STREAM_BUFFER_BYTES  # unread stream events kept for
    # slow readers, all streams together; past it the stream with the most unread is ended

    def __post_init__(self) -> None:
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("the API key is empty or blank, which any client can send (and a "
                             "web page rebinding its DNS name to this server would get in); "
                             "set a real key, or none (then only loopback Host names are "
                             "answered)")
        if self.max_concurrent < 1 or self.max_queue < 0:
            raise ValueError("max_concurrent must be >= 1 and max_queue >= 0")
        if not 0 <= self.sse_keepalive_s < float("inf") or self.max_stream_buffer_bytes < 1:
            raise ValueError("sse_keepalive_s must be >= 0 and max_stream_buffer_bytes >= 1")
        origins = tuple(normal_origin(o) for o in self.allowed_origins if o.strip())
        object.__setattr__(self, "allowed_origins", origins)
        object.__setattr__(self, "allowed_methods",
                           tuple(m.strip().upper() for m in self.allowed_methods if m.strip()))
        if "*" in origins and self.api_key is None:
            raise ValueError("allowed origins '*' without an API key would let any web page a "
                             "user opens drive this server; set an API key, or list the origins")
        if "*" in origins and self.allow_credentials:
            raise ValueError("allowed origins '*' with credentials would let any web page send "
                             "a user's cookies here; list the origins instead")

    def host_allow_list(self) -> frozenset[str] | None:
        if self.api_key is not None and not self.allowed_hosts:
            return None
        return LOOPBACK | {h.lower() for h in self.allowed_hosts}


def normal_origin(origin: str) -> str:
    """An origin as browsers send it: lower-case, without a trailing slash."""
    return origin.strip().lower().rstrip("/")
