"""The ``workbench`` command: ``workbench serve`` and ``workbench promote``.

It sits above every layer, so that the server (layer 4) and promote (layer 5) each contribute
their subcommand without importing upwards.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from workbench._version import __version__
from workbench.errors import WorkbenchError
from workbench.export.cli import add_promote_parser
from workbench.server.cli import add_serve_parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workbench", description="Triton Workbench: a Triton-compatible model server."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(commands)
    add_promote_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; a ``WorkbenchError`` prints ``error: ...`` and exits 1."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except WorkbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
