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
