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


def _note(folder, rank: int, kind: str, seconds: float, error: str = "") -> None:
    import json

    (folder / f"rank{rank}.{kind}.json").write_text(json.dumps({"rank": rank, "time": seconds, "error": error}))


def test_a_peers_echo_never_hides_the_rank_that_died_without_a_word(tmp_path):
    from paratrain.launcher.notes import first_failure, silent_failure

    _note(tmp_path, 0, "failure", 1.0, "RuntimeError: Connection closed by peer [127.0.0.1]:1234")
    _note(tmp_path, 2, "done", 0.5)
    assert silent_failure(tmp_path, [0, 2, 1]) == 1  # rank 2 had finished: a signal on its way out is no cause
    _note(tmp_path, 3, "failure", 2.0, "ValueError: bad batch")  # later by the clock, but a cause of its own
    assert first_failure(tmp_path)["rank"] == 3
    assert silent_failure(tmp_path, [0, 2, 1]) is None
