"""The one line a failed job ends with: the line of the error message that names the cause."""

import pytest

from paratrain.launcher.notes import CAUSE_CHARS, cause_line, exception_line


@pytest.mark.parametrize(("message", "line"), [
    ("Extension horovod.tensorflow has not been built: /x/mpi_lib.so not found\n"
     "If this is not expected, reinstall Horovod with HOROVOD_WITH_TENSORFLOW=1 to debug the build error.",
     "Extension horovod.tensorflow has not been built: /x/mpi_lib.so not found"),
    ("\n\n   Connection closed by peer [127.0.0.1]:1234  \nException raised from recvBytes at tcp.cpp:670\n"
     "frame #0: c10::Error::Error() + 0x96", "Connection closed by peer [127.0.0.1]:1234"),
    ("Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: \"fc.bias\".",
     "Error(s) in loading state_dict for Net: Missing key(s) in state_dict: \"fc.bias\"."),
    ("", ""),
    (" \n ", ""),
])
def test_the_cause_is_the_first_non_empty_line(message, line):
    assert cause_line(message) == line


def test_a_long_line_is_cut():
    line = cause_line("x" * 1000 + "\nadvice")
    assert len(line) == CAUSE_CHARS and line.endswith("…")


def test_an_exception_is_its_type_and_cause():
    assert exception_line(ValueError("bad value\nsee the docs")) == "ValueError: bad value"
    assert exception_line(KeyboardInterrupt()) == "KeyboardInterrupt"
