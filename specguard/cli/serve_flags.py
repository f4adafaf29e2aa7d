"""`specguard serve`'s flags for browsers (CORS) and streams; their values become `ServeSettings`
fields of the same names (see that class)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from specguard.serve.http.settings import (
    DEFAULT_CORS_HEADERS,
    DEFAULT_CORS_METHODS,
    DEFAULT_STREAM_BUFFER_BYTES,
)
from specguard_core.config import positive_int


def name_list(text: str) -> list[str]:
    """A flag's list: a JSON list of strings, or names separated by commas."""
    if text.strip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError:
            items = None
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise argparse.ArgumentTypeError("give a JSON list of strings, e.g. "
                                             "'[\"http://localhost:3000\"]', or a comma list")
        return [i.strip() for i in items if i.strip()]
    return [i.strip() for i in text.split(",") if i.strip()]


def add_browser_flags(p: Any) -> None:
    cors = p.add_argument_group("browsers (CORS)", "web pages of other origins are refused "
                                "(403) unless allowed here; an allowed origin gets CORS headers")
    cors.add_argument("--allowed-origins", type=name_list, default=[], metavar="LIST",
                      help="browser origins (scheme://host:port) allowed to call: a JSON list "
                      "or a comma list; '*' (any page) only with an API key (default: none "
                      "but the server's own)")
    cors.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                      help="one more allowed origin, repeatable")
    cors.add_argument("--allowed-methods", type=name_list, default=list(DEFAULT_CORS_METHODS),
                      metavar="LIST", help="methods an allowed page may use, JSON or comma list "
                      "('*': all; default: GET,POST)")
    cors.add_argument("--allowed-headers", type=name_list, default=list(DEFAULT_CORS_HEADERS),
                      metavar="LIST", help="request headers an allowed page may send, JSON or "
                      "comma list ('*': any; default: Authorization,Content-Type)")
    cors.add_argument("--allow-credentials", action="store_true",
                      help="let allowed pages send cookies (only a cookie-based proxy in front "
                      "needs it; the API key is a header); not with '*'")


def add_stream_flags(p: Any) -> None:
    p.add_argument("--sse-keepalive", type=float, default=10.0, metavar="SECONDS",
                   help="send an SSE comment on every stream this often, so proxies keep it "
                   "open while a step is written (default %(default)s; 0: never)")
    p.add_argument("--max-stream-buffer-bytes", type=positive_int,
                   default=DEFAULT_STREAM_BUFFER_BYTES, metavar="N",
                   help="unread stream events kept for slow readers, all streams together; "
                   "past it the stream furthest behind is ended with an error event (default "
                   "%(default)s)")
