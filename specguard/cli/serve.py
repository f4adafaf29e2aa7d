"""`specguard serve`: load the draft/target pair once and serve it over an OpenAI-compatible API.

The listening socket is bound before the models load, so a port in use (or not allowed) fails in
a second with a plain message. FastAPI, uvicorn and the rest of the `serve` extra are imported in
the handler only, so `specguard --help` stays fast.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from pathlib import Path
from typing import Any

from specguard.cli.run import add_load_flags, load_options
from specguard.cli.serve_flags import add_browser_flags, add_stream_flags
from specguard.serve.api.extension import Limits
from specguard.serve.http.settings import LOOPBACK
from specguard_core.config import (
    DEFAULT_PRESET,
    PRESETS,
    EngineConfig,
    NormBounds,
    SpecGuardConfig,
    parse_sets,
    positive_int,
    preset,
)
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET

API_KEY_ENV = "SPECGUARD_API_KEY"


def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve the pair over an OpenAI-compatible HTTP API",
                       description="Serve /v1/chat/completions, /v1/completions, /v1/models and "
                       "/health (FastAPI + uvicorn; from a checkout: `pip install -e '.[serve]'`).")
    p.add_argument("--draft", default=DEFAULT_DRAFT, help="draft model (default %(default)s)")
    p.add_argument("--target", default=DEFAULT_TARGET, help="target model (default %(default)s)")
    p.add_argument("--preset", choices=sorted(PRESETS), default=DEFAULT_PRESET)
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="default config override, repeatable (k=4, tau=0.6); a request may "
                   "override these with its OpenAI fields or extra_body={'specguard': {...}}")
    p.add_argument("--bounds", help="normaliser bounds JSON from `specguard calibrate`")
    p.add_argument("--max-new-tokens", type=positive_int, default=None, metavar="N",
                   help="the answer's token budget when a request sets no max_tokens (default: "
                   "none, the answer runs until the context window is full, as vLLM's does)")
    add_load_flags(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s; "
                   "use 0.0.0.0 only with --api-key)")
    p.add_argument("--port", type=int, default=8000, help="default %(default)s")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--api-key", help="require 'Authorization: Bearer KEY' (visible to other "
                     f"users in the process list: prefer --api-key-file or ${API_KEY_ENV}); "
                     f"default: --api-key-file, else ${API_KEY_ENV}, else none (then only "
                     "loopback Host names are answered)")
    key.add_argument("--api-key-file", metavar="PATH", help="read the API key from this file "
                     "(its first line)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a Host name to answer besides 127.0.0.1, localhost and ::1, repeatable "
                   "(with --api-key and none given, any Host is answered)")
    add_browser_flags(p)
    p.add_argument("--max-k", type=positive_int, default=Limits().max_k, metavar="N",
                   help="the largest k and fallback_k a request may ask for (default "
                   "%(default)s; each candidate holds a KV cache)")
    p.add_argument("--max-tokens-cap", type=positive_int, default=None, metavar="N",
                   help="the largest max_tokens (and max_new_tokens, max_steps, max_step_tokens) "
                   "a request may ask for, and the budget of one that sets none (default: no cap "
                   "but the context window)")
    p.add_argument("--verifier-dir", metavar="DIR", help="a folder of verifier cards a request "
                   "may name (extra_body={'specguard': {'verifier': 'NAME'}}); default: none, "
                   "requests choose 'auto' or 'paper' only")
    p.add_argument("--max-body-bytes", type=positive_int, default=Limits().max_body_bytes,
                   metavar="N", help="the largest request body (default %(default)s)")
    p.add_argument("--served-model-name", help="the model id clients send (default: "
                   "specguard:<draft>+<target> as given here; GET /v1/models shows it)")
    p.add_argument("--batching", action=argparse.BooleanOptionalAction, default=None,
                   help="concurrent requests share the models' forwards (EngineConfig(batching="
                   "True), README \"Batching\"); default: on, unless --trust-remote-code (a "
                   "model's own code may ignore the padding masks batching needs) or this "
                   "transformers cannot batch; --no-batching: they take turns step by step, "
                   "each equal to its serial run")
    p.add_argument("--max-batch-rows", type=positive_int, default=None, metavar="N",
                   help="the most rows in one batched forward (default "
                   f"{EngineConfig().max_batch_rows}; a k-candidate proposal brings k rows)")
    p.add_argument("--max-concurrent", type=int, default=None,
                   help="requests run at once (default: the engine's max_active_requests, "
                   f"{EngineConfig().max_active_requests}, when batching; 1 without)")
    p.add_argument("--max-queue", type=int, default=16,
                   help="requests waiting for a slot; more get 503 (default %(default)s)")
    add_stream_flags(p)
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=cmd_serve)


def _config(args: argparse.Namespace) -> SpecGuardConfig:
    overrides: dict[str, Any] = parse_sets(args.sets)
    if args.bounds:
        overrides["bounds"] = NormBounds.load(args.bounds)
    return preset(args.preset, max_new_tokens=args.max_new_tokens, **overrides)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, or an OSError whose message says what to do."""
    if not 0 <= port <= 65535:
        raise OSError(f"--port {port} is not a port number (0-65535)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as err:
        where = f"{host}:{port}"
        if err.errno == errno.EADDRINUSE:
            msg = f"cannot listen on {where}: the port is already in use; pick another --port"
        elif err.errno == errno.EACCES:
            msg = (f"cannot listen on {where}: not allowed (ports below 1024 need privileges); "
                   "pick --port 1024 or above")
        elif err.errno == errno.EADDRNOTAVAIL or isinstance(err, socket.gaierror):
            msg = (f"cannot listen on {where}: {host} is not an address of this machine; use "
                   "127.0.0.1 (local) or 0.0.0.0 (all interfaces)")
        else:
            msg = f"cannot listen on {where}: {err.strerror or err}"
        raise OSError(msg) from None


def _api_key(args: argparse.Namespace) -> str | None:
    """--api-key, else the first line of --api-key-file, else $SPECGUARD_API_KEY, else None
    (an OSError whose message says what to do for a file that cannot be used)."""
    if args.api_key:
        return str(args.api_key)
    if args.api_key_file:
        try:
            lines = Path(args.api_key_file).expanduser().read_text().splitlines()
        except (OSError, UnicodeDecodeError) as err:
            raise OSError(f"cannot read --api-key-file {args.api_key_file}: "
                          f"{getattr(err, 'strerror', None) or err}") from None
        key = lines[0].strip() if lines else ""
        if not key:
            raise OSError(f"--api-key-file {args.api_key_file} is empty; write the key on its "
                          "first line")
        return key
    return os.environ.get(API_KEY_ENV) or None


def _batching(args: argparse.Namespace) -> bool:
    """`--batching` / `--no-batching` as given; by default on, unless the models run their own
    code (`--trust-remote-code`), run on llama.cpp, or this transformers cannot batch (said on
    stderr)."""
    if args.batching is not None:
        return bool(args.batching)
    from specguard_core.concurrency.batcher import unsupported

    why = ("--trust-remote-code: a model's own code may ignore the padding masks batching needs"
           if args.trust_remote_code else "batching is transformers' (--backend llama.cpp)"
           if args.backend == "llama.cpp" else unsupported())
    if why:
        print(f"note: batching off ({why}); concurrent requests take turns step by step "
              "(--batching forces it on)", file=sys.stderr)
    return why is None


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from specguard.serve.app import ServeSettings, create_app
    except ImportError as err:
        print("error: `specguard serve` needs FastAPI, uvicorn, sse-starlette, prometheus-client "
              f"and openai ({err.name} is missing); install them with: pip install -e '.[serve]' (from a "
              "checkout)", file=sys.stderr)
        return 2
    load = load_options(args)  # a bad loading flag fails before the port is taken
    target = load.target_url or args.target
    target_name = load.target_model or target
    batching = _batching(args)
    if args.max_batch_rows is not None and not batching:
        print("error: --max-batch-rows bounds batched forwards, and batching is off (see the "
              "note above, or --no-batching); add --batching or drop --max-batch-rows",
              file=sys.stderr)
        return 2
    engine_config = EngineConfig(batching=True, **(
        {"max_batch_rows": args.max_batch_rows} if args.max_batch_rows is not None else {})
    ) if batching else None
    concurrent = args.max_concurrent if args.max_concurrent is not None else (
        engine_config.max_active_requests if engine_config else 1)
    try:
        api_key = _api_key(args)
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    cfg = _config(args)
    limits = Limits(max_k=args.max_k, max_tokens=args.max_tokens_cap,
                    max_body_bytes=args.max_body_bytes,
                    verifier_dir=Path(args.verifier_dir).expanduser() if args.verifier_dir
                    else None)
    if limits.verifier_dir is not None and not limits.verifier_dir.is_dir():
        print(f"error: --verifier-dir {args.verifier_dir} is not a folder; give the folder of "
              "the verifier cards requests may name", file=sys.stderr)
        return 2
    try:
        settings = ServeSettings(
            api_key=api_key, max_concurrent=concurrent, max_queue=args.max_queue,
            model_name=args.served_model_name or f"specguard:{args.draft}+{target_name}",
            limits=limits, allowed_hosts=tuple(args.allowed_host),
            allowed_origins=(*args.allowed_origins, *args.allowed_origin),
            allowed_methods=tuple(args.allowed_methods),
            allowed_headers=tuple(args.allowed_headers),
            allow_credentials=args.allow_credentials, sse_keepalive_s=args.sse_keepalive,
            max_stream_buffer_bytes=args.max_stream_buffer_bytes)
    except ValueError as err:
        print(f"error: {err} (--allowed-origins, --api-key, --allow-credentials, "
              "--sse-keepalive)", file=sys.stderr)
        return 2
    sock = bind(args.host, args.port)
    if args.host not in LOOPBACK and not settings.api_key:
        print(f"warning: listening on {args.host} without --api-key: anyone who can reach this "
              "port can use the models", file=sys.stderr)
    from rich.console import Console

    from specguard_core.engine.loop import SpecGuardEngine

    try:
        with Console(stderr=True).status(f"loading {args.draft} and {target} ..."):
            engine = SpecGuardEngine.from_pretrained(args.draft, args.target, config=cfg,
                                                     engine_config=engine_config, load=load)
    except BaseException:
        sock.close()
        raise
    app = create_app(engine, settings)
    name = settings.model_name
    host, port = sock.getsockname()[:2]
    print(f"serving {name} on http://{host}:{port}/v1", file=sys.stderr)
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level))
    server.run(sockets=[sock])
    return 0
