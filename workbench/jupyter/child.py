"""The embedded server as the Jupyter server's child: ``python -m workbench.jupyter.child OPTIONS``.

``OPTIONS`` is a JSON object: ``model_repository`` and ``workbench.Server`` keywords. The child
serves on 127.0.0.1, loads every model (explicit model control, ``--load-model=*``), then
prints one line ``READY_PREFIX {"http_port": ..., "grpc_port": ..., "metrics_port": ...}`` on
stdout. It serves until its standard input closes or it gets SIGTERM, then drains in-flight
requests and unloads the models as ``workbench serve`` does on SIGTERM.

Standard input is a pipe whose only writer is the Jupyter server, so it closes when Jupyter
stops the server *and* when Jupyter dies, even by SIGKILL: the child never outlives it holding
ports and stub processes. A start that fails prints ``READY_PREFIX {"error": ...}`` and exits 1.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

#: the first word of the line that reports the ports (or the start's error) to the parent
READY_PREFIX = "WORKBENCH-READY"


class _Terminated(Exception):
    """SIGTERM: leave the wait for end of input and stop."""


def _terminate(_signum: int, _frame: Any) -> None:
    raise _Terminated


def report(fields: dict[str, Any]) -> None:
    print(f"{READY_PREFIX} {json.dumps(fields)}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    options: dict[str, Any] = json.loads(args[0])
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if options.get("log_verbose", 0) > 0 else logging.INFO,
        format="%(levelname).1s %(name)s] %(message)s",
    )
    from workbench.errors import WorkbenchError
    from workbench.server.hosting import Server

    signal.signal(signal.SIGTERM, _terminate)
    repository = options.pop("model_repository")
    try:
        server = Server(repository, **options).start()
    except (WorkbenchError, TypeError, OSError) as exc:
        report({"error": str(exc) or type(exc).__name__})
        return 1
    report(
        {
            "http_port": server.http_port,
            "grpc_port": server.grpc_port,
            "metrics_port": server.metrics_port,
        }
    )
    try:
        sys.stdin.buffer.read()
    except (_Terminated, KeyboardInterrupt):
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        server.stop()
    return 0 if server.stopped_in_time else 1


if __name__ == "__main__":
    sys.exit(main())
