"""pytest-timeout's ``thread`` method, made to leave its evidence where xdist shows it.

The suite bounds every test (``[tool.pytest.ini_options] timeout``, method ``thread``: a test
hung in compiled code never returns to Python, where the ``signal`` method would act).
pytest-timeout's own thread method writes its stack dump to the terminal writer and calls
``os._exit(1)``; in an xdist worker that writer is not the run's output, so a timed-out test
showed only "node down: Not properly terminated", with neither the test's stack nor the
word "Timeout" anywhere.

Here the timer is faulthandler's (``dump_traceback_later(exit=True)``): a C thread that needs
no GIL, dumps every thread's Python stack ("Timeout (0:15:00)!", then the test's frames) to
the stderr pytest kept for crash reports (its faulthandler plugin's copy of the original
stderr, which an xdist worker shares with the controller), then ends the process with
status 1, as pytest-timeout does. Where that plugin is off, pytest-timeout's own timer runs.

:func:`loud_sigterm` does the same for a SIGTERM to a worker that holds the session's Ray,
whose driver ``ray.init`` gives a SIGTERM handler that exits quietly (``sys.exit``).
"""

import faulthandler
import os
import signal

import pytest

try:  # the fd pytest keeps for crash reports (a private name: without it, pytest-timeout's timer)
    from _pytest.faulthandler import fault_handler_stderr_fd_key
except ImportError:
    fault_handler_stderr_fd_key = None


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    key = fault_handler_stderr_fd_key
    if settings.method != "thread" or key is None or key not in item.config.stash:
        return None  # pytest-timeout's own timer
    faulthandler.dump_traceback_later(settings.timeout, exit=True, file=item.config.stash[key])
    item.cancel_timeout = faulthandler.cancel_dump_traceback_later  # pytest-timeout calls it
    return True


def loud_sigterm(config) -> None:
    """Wraps this process's SIGTERM handler (``ray.init``'s, where it ran in the main thread)
    so that a SIGTERM first writes a line and every thread's stack to the stderr pytest keeps
    for crash reports, then does what it did before. Called after ``ray.init`` in the main
    thread (tests/conftest.py ``_LocalRay``); without that stderr, nothing changes."""
    key = fault_handler_stderr_fd_key
    if key is None or key not in config.stash:
        return
    fd, previous = config.stash[key], signal.getsignal(signal.SIGTERM)

    def handler(signum, frame):
        os.write(fd, f"\nSIGTERM to pid {os.getpid()}, a test worker holding Ray:\n".encode())
        faulthandler.dump_traceback(file=fd, all_threads=True)
        if callable(previous):
            previous(signum, frame)
        else:  # the default action, or none
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)
