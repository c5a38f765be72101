"""Version checks for `paratrain doctor`, safe to run anywhere: an installed package's version without importing it,
and a snippet run in its own interpreter with a time limit — an optional backend that hangs or crashes on import
shows as an error line instead of breaking the report. Each method's own probe (``MethodSpec.doctor_component``)
is written with these."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata


@dataclass(frozen=True)
class Component:
    name: str
    version: str | None  # None when not installed / not built
    detail: str = ""
    fix: str = ""


def dist_version(*names: str) -> str | None:
    """The first of these distributions that is installed, or None."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def probe(code: str, timeout: float) -> dict:
    """Run a snippet that prints one JSON object, in its own interpreter, with a time limit."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"check timed out after {timeout:g} s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exited with code {proc.returncode}"])[-1]
        return {"error": last}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"error": "unreadable check output"}
