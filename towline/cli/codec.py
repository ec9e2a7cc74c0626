"""`towline codec-server`: serve Temporal's codec-server protocol for encrypted runs.

    towline codec-server --port 8234 --ui-origin http://localhost:8233

The Temporal UI (Settings -> Codec Server, or `temporal server start-dev
--ui-codec-endpoint`) and `temporal workflow show --codec-endpoint URL` decode the
payloads of encrypted runs through it, with the keys in TOWLINE_ENCRYPTION_KEY.
"""

from __future__ import annotations

import os
from typing import Any

from towline.cli.args import Subcommands, add_allow_host, command, port_number
from towline.cli.common import (
    EXIT_USAGE,
    CliError,
    encryption,
    port_free,
    port_in_use,
    say,
    stop_event,
)
from towline.encryption.codec import KEY_ENV, generate_key
from towline.encryption.codec_server import DEFAULT_ORIGINS, CodecServer
from towline.errors import ConfigurationError

__all__ = ["AUTH_ENV", "codec_server_command", "register"]

AUTH_ENV = "TOWLINE_CODEC_AUTH"
"""Default for `--auth`: the `Authorization` header value requests must carry."""


async def codec_server_command(args: Any) -> int:
    """`towline codec-server`: decode (and encode) payloads over HTTP until Ctrl-C."""
    if args.generate_key:
        print(generate_key())
        return 0
    codec = encryption(True)
    assert codec is not None
    if not port_free(args.port, args.host):
        raise port_in_use("codec server", args.port)
    origins = tuple(args.ui_origin or DEFAULT_ORIGINS)
    try:
        server = CodecServer(codec, host=args.host, port=args.port, origins=origins,
                             auth=args.auth or os.environ.get(AUTH_ENV) or None,
                             allowed_hosts=tuple(args.allow_host or ()))
    except ConfigurationError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    stop = stop_event()
    with server:
        say(f"towline codec server {server.url}  (key id {codec.key_id}; UI origins "
            f"{', '.join(origins)}; auth {'required' if server.auth else 'off'}). Ctrl-C stops.")
        say(f"  temporal workflow show --workflow-id ID --codec-endpoint {server.url}")
        await stop.wait()
    say("stopped")
    return 0


def register(sub: Subcommands) -> None:
    """`towline codec-server`."""
    p = command(
        sub, "codec-server", codec_server_command, connection=False,
        help="decode encrypted payloads for the Temporal UI and CLI",
        description="Serve Temporal's codec-server protocol (POST /encode, /decode) with the keys "
        f"in {KEY_ENV}, so the Temporal UI and `temporal --codec-endpoint` show encrypted runs "
        "to whoever can reach it (and holds --auth, when set).")
    p.add_argument("--port", type=port_number, default=8234, metavar="PORT",
                   help="port to listen on (default: 8234)")
    p.add_argument("--host", default="127.0.0.1", metavar="HOST",
                   help="interface to listen on (default: 127.0.0.1)")
    p.add_argument("--ui-origin", action="append", metavar="URL",
                   help="origin of the Temporal UI allowed to call it (CORS); repeatable "
                   f"(default: {', '.join(DEFAULT_ORIGINS)}; '*' allows any)")
    add_allow_host(p, suffix=" (a proxy checks Host)")
    p.add_argument("--auth", metavar="VALUE",
                   help=f"require this exact Authorization header, e.g. 'Bearer s3cret' "
                   f"(default: {AUTH_ENV}, else none)")
    p.add_argument("--generate-key", action="store_true",
                   help=f"print a new random key for {KEY_ENV} and exit")
