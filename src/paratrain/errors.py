"""One family of user-facing errors.

Library code raises a :class:`ParatrainError` whose message says what was chosen, what is allowed and how to fix
it. The CLI turns these (and only these) into a one-line message with exit code 2; anything else is a bug and keeps
its traceback under ``--debug``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ParatrainError(Exception):
    """Base class for errors a user can fix. ``hint`` is the suggested fix, printed after the message."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message.rstrip(".")
        if not self.hint:
            return text
        return f"{text} HINT: {self.hint}" if text.endswith(("?", "!")) else f"{text}. HINT: {self.hint}"


class UnknownStrategyError(ParatrainError):
    """A method name or option that the registry does not know."""


class StrategyUnavailableError(ParatrainError):
    """A known method that cannot run here (package missing, no GPU, not implemented yet)."""


class LaunchError(ParatrainError):
    """The launcher could not start, or a launched job failed."""

    def __init__(self, message: str, hint: str | None = None, exit_code: int = 1) -> None:
        super().__init__(message, hint)
        self.exit_code = exit_code


class ConfigError(ParatrainError):
    """A bad flag value, config file or combination of options."""


class CheckpointError(ParatrainError):
    """A checkpoint that is missing, incomplete or does not fit the model."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ' Did you mean "x"?' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f' Did you mean "{close[0]}"?' if close else ""


class SetupError(ParatrainError):
    """Installing or building an optional backend failed (the message names the step and the log)."""

    exit_code = 1
