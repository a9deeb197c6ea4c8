"""The ``workbench`` command. ``workbench serve`` takes tritonserver's flag names."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from workbench.errors import WorkbenchError
from workbench.server.hosting import DEFAULT_MAX_INPUT_BYTES, Server

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _bool(text: str) -> bool:
    """tritonserver's boolean flags: ``--strict-model-config=false`` and friends."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _add_serve(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve", help="serve a model repository (tritonserver-compatible flags)"
    )
    flag = serve.add_argument
    flag(
        "--model-repository",
        "--model-store",
        action="append",
        required=True,
        dest="model_repository",
        help="model repository path (repeatable)",
    )
    flag("--http-port", type=int, default=8000)
    flag("--http-address", default="0.0.0.0", help="address to listen on (tritonserver's default)")
    flag("--model-control-mode", choices=("none", "explicit", "poll"), default="none")
    flag(
        "--load-model",
        action="append",
        default=[],
        help="model to load in explicit mode; '*' = all",
    )
    flag("--repository-poll-secs", type=float, default=15.0)
    flag("--strict-model-config", type=_bool, nargs="?", const=True, default=False)
    flag("--disable-auto-complete-config", action="store_true")
    flag("--strict-readiness", type=_bool, nargs="?", const=True, default=True)
    flag("--model-config-name", default=None)
    flag("--exit-timeout-secs", type=float, default=30.0)
    flag("--http-max-input-size", type=int, default=DEFAULT_MAX_INPUT_BYTES)
    flag("--log-verbose", type=int, default=0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workbench", description="Triton Workbench: a Triton-compatible model server."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_serve(commands)
    return parser


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.log_verbose > 0 else logging.INFO,
        format="%(asctime)s %(levelname).1s %(name)s] %(message)s",
    )
    server = Server(
        args.model_repository,
        http_port=args.http_port,
        host=args.http_address,
        model_control_mode=args.model_control_mode,
        load_model=args.load_model,
        repository_poll_secs=args.repository_poll_secs,
        strict_model_config=args.strict_model_config or args.disable_auto_complete_config,
        strict_readiness=args.strict_readiness,
        model_config_name=args.model_config_name,
        exit_timeout_secs=args.exit_timeout_secs,
        max_input_bytes=args.http_max_input_size,
        log_verbose=args.log_verbose,
    )
    server.serve_forever()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return serve(args)
    except WorkbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
