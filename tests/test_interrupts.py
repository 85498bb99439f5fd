"""A Ctrl-C that Python swallows (raised inside a garbage-collection callback, "Exception
ignored") is raised again at the next written measurement (`xlafuse.experiment.interrupts`)."""

import os
import signal

import pytest

from xlafuse.experiment import interrupts


def test_a_swallowed_ctrl_c_is_raised_at_the_next_check():
    with interrupts.sticky():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        interrupts.check()  # none yet
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs at one of these bytecodes
                pass
        except KeyboardInterrupt:
            pass  # what a garbage-collection callback does with it
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with interrupts.sticky():
        interrupts.check()  # a new command starts with none pending


def test_a_background_job_that_ignores_ctrl_c_keeps_ignoring_it():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts.sticky():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
