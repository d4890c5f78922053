"""Optimizing and planning a big capture off its first call (issue 13: the first-call budget).

An unrolled Python loop records tens of thousands of nodes. Recording them is the first call's
own work (the call runs the function), but optimizing the graph and generating its plan cost
as much again, and the caller has its eager result as soon as the function has returned. So a
capture of at least ``DefaultsOptions.background_nodes`` recorded nodes hands that work to a
:class:`PendingCapture`: a daemon thread optimizes, places and finalizes the graph while the
first call returns, as a JIT VM compiles a hot method in the background. The next call that
needs the graph (a matching call, ``current_graph``, ``take_graph``, ``wait_for_engines``)
waits for it: later calls always run the graph (never the Python function again), so the
work is moved off the first call, not skipped.

The thread's work never raises: a failure of kiln's own becomes a capture that serves its
structure eagerly, with the stage and the exception (:func:`kiln.capture.recorder.record_capture`
says the same of a failure on the first call itself). In a child process forked while the
work was under way the thread is gone and the graph half rewritten: the structure then serves
eagerly, as for any other failure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .replay import Capture

__all__ = ["PendingCapture"]


class PendingCapture:
    """A capture being optimized and planned in a daemon thread: ``work()`` makes the finished
    :class:`~kiln.capture.replay.Capture` (one whose ``failure`` says why when kiln failed).

    :meth:`result` waits for it; any number of threads may wait, and it is computed once.
    """

    def __init__(self, work: Callable[[], Capture], failed: Callable[[str], Capture]) -> None:
        self._work = work
        self._failed = failed  # the capture that serves eagerly, given why
        self._done = threading.Event()
        self._result: Capture | None = None
        self._thread = threading.Thread(target=self._run, name="kiln-finalize", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = self._work()
        except BaseException as exc:  # never leave a waiter without a capture
            self._result = self._failed(f"planning in the background: {type(exc).__name__}: {exc}")
        finally:
            self._work = None  # type: ignore[assignment]  # free what the work held
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the work is done, at most ``timeout`` seconds (None: as long as it
        takes); whether it is done."""
        if timeout is None:
            self.result()
            return True
        return self._done.wait(timeout)

    def result(self) -> Capture:
        """The finished capture, once the background work is done (waits for it)."""
        while not self._done.wait(0.1):
            if not self._thread.is_alive() and not self._done.is_set():
                # Forked while the work ran: this process has no thread to finish it.
                self._result = self._failed(
                    "planning in the background: interrupted (the process was forked while "
                    "the graph was being optimized)"
                )
                self._done.set()
        assert self._result is not None
        return self._result
