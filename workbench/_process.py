"""Whether a process still runs, by its id (for files that name the process that wrote them:
the extension's discovery file, a promote's staging folder)."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """True while ``pid`` names a running process, also one of another user's."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
