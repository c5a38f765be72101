"""compare's cell keys are declared once (bench/results.py) and documented exactly (docs/results-schema.md)."""

from __future__ import annotations

import re
from pathlib import Path

from paratrain.bench import results

SCHEMA_DOC = Path(__file__).resolve().parents[2] / "docs" / "results-schema.md"


def _documented_cell_keys() -> set[str]:
    text = SCHEMA_DOC.read_text()
    section = text[text.index("\n## cells"):text.index("\n## floors")]
    keys: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            keys.update(re.findall(r"`([a-z_0-9]+)`", line.split(" | ")[0]))
    return keys


def test_the_schema_page_documents_exactly_the_declared_keys():
    declared = set(results.KEYS) | set(results.OCCASIONAL)
    documented = _documented_cell_keys()
    assert declared - documented == set(), "declared in CellResult but not documented"
    assert documented - declared == set(), "documented but not declared in CellResult"


def test_complete_fills_every_key_without_sharing_mutables():
    a, b = results.complete({"key": "ddp×2", "status": "ok"}), results.complete({})
    assert set(results.KEYS) <= set(a) and a["key"] == "ddp×2" and a["status"] == "ok"
    a["losses"].append(1.0)
    assert b["losses"] == [], "two cells share one default list"


def test_the_version_of_older_results_is_one():
    assert results.schema_version({}) == 1
    assert results.schema_version({"schema_version": results.SCHEMA_VERSION}) == results.SCHEMA_VERSION
