"""`python -m tether.testing --port N`: serve the demo scripts until stopped.

Prints one line, `tether-localserver listening on http://HOST:PORT`, once it accepts
requests, so a parent process can wait for that line instead of sleeping.
"""

from __future__ import annotations

import argparse
import sys

from tether.testing.app import LocalModelServer
from tether.testing.demo import DEMO_SCRIPTS
from tether.testing.serving import ServerStartError, run_local_models

READY_LINE = "tether-localserver listening on {url}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tether.testing",
        description="Scripted OpenAI/Anthropic-compatible model server (models: "
        + ", ".join(f"script:{name}" for name in DEMO_SCRIPTS)
        + ").",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)

    def announce(server: LocalModelServer) -> None:
        print(READY_LINE.format(url=server.base_url), flush=True)

    try:
        run_local_models(
            dict(DEMO_SCRIPTS),
            host=args.host,
            port=args.port,
            on_ready=announce,
            log_level=args.log_level,
        )
    except ServerStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
