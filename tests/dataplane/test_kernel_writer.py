"""The kernel writer's process (dataplane/kernel/sandbox.py): how the worker ends it.

Nothing is asked of the child here: it is started and ended, and never reaches a kernel."""

from __future__ import annotations

import os
import signal
import time

from dataplane.kernel import sandbox


def test_a_writer_ended_without_waiting_is_reaped_later_and_killed_if_it_stays():
    """After a big libnftables load the writer is ended so that what libnftables held is given back; the
    worker no longer waits for it to exit (64 ms after 1,000 farms, inside the apply's time). A child that
    has not exited yet is reaped at the next close, and one that stays past LEAVE_SECONDS is killed."""
    writer = sandbox.Writer()
    writer._start()
    stuck = writer._proc
    os.kill(stuck.pid, signal.SIGSTOP)  # it cannot exit: only a wait would tell
    try:
        started = time.monotonic()
        writer.close(wait=False)
        assert time.monotonic() - started < 1 and stuck.poll() is None
        assert [proc for proc, _since in writer._leaving] == [stuck]
        os.kill(stuck.pid, signal.SIGCONT)  # it reads the end of its request pipe and exits
        writer.close()
        assert stuck.returncode == 0 and not writer._leaving
        writer._start()
        stopped = writer._proc
        os.kill(stopped.pid, signal.SIGSTOP)
        writer.close(wait=False)
        writer._leaving = [(stopped, time.monotonic() - sandbox.LEAVE_SECONDS)]  # as if ended long ago
        writer.close(wait=False)
        assert stopped.returncode == -signal.SIGKILL and not writer._leaving
    finally:
        for proc in (stuck, locals().get("stopped")):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
