"""gRPC throughput and p99, Triton 2.51 vs workbench: ``http_throughput.py --protocol grpc``.

Usage::

    python benchmarks/grpc_throughput.py --concurrency 1 8 32 --measurement-ms 3000
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.http_throughput import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["--protocol", "grpc", *sys.argv[1:]]))
