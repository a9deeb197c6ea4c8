"""Where traces are written: Triton's ``TraceManager::TraceFile`` (``src/tracer.cc``, 2.51).

Traces are written in batches (see ``TraceSetting.write_trace``): either appended to the file
itself, which is opened on the first batch (``[`` first, ``,`` between batches) and closed
with ``]`` when tracing stops (server shutdown), or each batch into its own indexed file
``<file>.0``, ``<file>.1``, ... as a whole JSON array. The index counts per file name for
the server's lifetime. So while the server runs, ``<file>`` is a JSON array without its
closing ``]`` (readers in ``workbench.bench.trace`` accept that), and indexed files are
complete as soon as they exist.
"""

from __future__ import annotations

import logging
import os
from typing import TextIO

log = logging.getLogger("workbench.core.trace")


class TraceFile:
    """One trace file name and the indexed files written next to it."""

    def __init__(self, name: str) -> None:
        self.name = name
        #: the next ``<file>.<index>``
        self.index = 0
        self._stream: TextIO | None = None
        #: tracing stopped: ``<file>`` has its ``]`` and takes nothing more
        self.closed = False

    def save(self, text: str, indexed: bool) -> None:
        """Write one batch of traces (entries joined by commas); failures are logged, as
        Triton does, and the traces are lost."""
        try:
            if indexed:
                self._save_indexed(text)
            else:
                self._append(text)
        except OSError as exc:
            log.error("failed creating trace file: %s", exc)

    def _save_indexed(self, text: str) -> None:
        path = f"{self.name}.{self.index}"
        self.index += 1
        # Written whole, then renamed: a reader polling for it never sees half a file.
        partial = f"{path}.partial"
        with open(partial, "w", encoding="utf-8") as stream:
            stream.write(f"[{text}]")
        os.replace(partial, path)

    def _append(self, text: str) -> None:
        if self.closed:  # a trace released after the stop (a call that ended late)
            log.warning("trace dropped: the trace file %s was closed at shutdown", self.name)
            return
        if self._stream is None:
            self._stream = open(self.name, "w", encoding="utf-8")  # noqa: SIM115 - kept open
            self._stream.write("[")
        else:
            self._stream.write(",")
        self._stream.write(text)
        self._stream.flush()

    def close(self) -> None:
        """End the file's JSON array (only a file that was written to has one)."""
        self.closed = True
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.write("]")
            finally:
                stream.close()


__all__ = ["TraceFile"]
