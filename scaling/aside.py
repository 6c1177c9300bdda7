"""Work done beside the main process in a forked child (Aside), so that a 2-core machine keeps both cores
busy: an analysis' figures drawn and saved while the fits and verdicts are worked out (analysis.pipeline),
half of a big sweep's curves read while this process reads the other half (scaling.tracking.table).

The figures, drawn after the fits and verdicts, kept one core idle for seconds. A fork starts in milliseconds
with what the parent read in its memory; what it returns comes back pickled through a pipe. Nothing is forked
while another thread runs (a fork copies only the forking thread, and a lock another thread held could stay
locked in the child): then, as where ``fork`` does not exist or the child fails, the caller does the work
itself, as before, and meets its error there.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from typing import Any, Callable


class Aside:
    """``work()`` run in a forked child from now on; ``result()`` its return value, or None where it could
    not run there (the caller then runs the work itself)."""

    def __init__(self, work: Callable[[], Any]):
        self.pid: int | None = None
        if not hasattr(os, "fork") or threading.active_count() > 1:
            return
        read, write = os.pipe()
        sys.stdout.flush()  # what is buffered now is the parent's to print, not the child's too
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: do the work, send its result, leave without the parent's exit handlers
            os.close(read)
            _child(work, write)
        os.close(write)
        self.pid, self.read = pid, read

    def result(self) -> Any:
        """The work's return value once the child has finished (None: it did not run, or failed)."""
        if self.pid is None:
            return None
        with os.fdopen(self.read, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        if os.waitstatus_to_exitcode(status) != 0 or not data:
            return None
        return pickle.loads(data)


def _child(work: Callable[[], Any], write: int) -> None:
    """Run ``work`` in the forked child and write its pickled result to ``write``; never returns."""
    code = 1
    try:
        data = pickle.dumps(work())
        with os.fdopen(write, "wb") as pipe:
            pipe.write(data)
        code = 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
