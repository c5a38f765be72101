"""Shared rendering helpers for CLI commands (JSON output, status colours)."""

from __future__ import annotations

import json
from typing import Any

from paratrain import console

STATUS_STYLE = {"available": "green", "not available": "red", "not implemented": "dim", "check failed": "yellow"}


def print_json(data: Any) -> None:
    """Machine output on stdout: plain JSON, no markup, no wrapping."""
    console.out.print(json.dumps(data, indent=2, default=str), markup=False, highlight=False, soft_wrap=True)


def styled(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"


def help_text(text: str) -> str:
    """Command help written as wrapped source text, made to render well at any terminal width: typer keeps single
    line breaks, so each prose paragraph becomes one line that rich wraps to the terminal; a block of indented
    lines (examples) keeps its breaks."""
    paragraphs = []
    for paragraph in text.strip().split("\n\n"):
        lines = paragraph.splitlines()
        if any(line.startswith(" ") for line in lines):
            paragraphs.append(paragraph)
        else:
            paragraphs.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(paragraphs)
