"""``paratrain gpus`` end to end through the real entry point: for real on this GPU-less machine, and against
the fake NVML (injected through ``inventory.nvml_module``) for the table, JSON and topology on GPUs."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import psutil
import pytest

from paratrain.cli.main import main
from paratrain.devices import inventory
from tests.helpers import fake_pynvml
from tests.helpers.fake_pynvml import FakeNvml

MIB = 1 << 20
NO_GPU = re.compile(r"No NVIDIA GPU found \(NVML: (?P<reason>[^)]+)\)\. CPU: (?P<cores>\d+) cores, "
                    r"(?P<gib>[\d.]+) GiB; distributed training will use the gloo backend\.")


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich reads it per print: no wrapped cells in assertions
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture()
def real_nvml_absent():
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return
    pynvml.nvmlShutdown()
    pytest.skip("NVML works on this machine; the no-GPU path cannot be observed for real")


def _use_fake(monkeypatch, fake: FakeNvml) -> FakeNvml:
    monkeypatch.setattr(inventory, "nvml_module", lambda: fake)
    return fake


def test_no_gpu_message_for_real(capsys, real_nvml_absent):
    assert main(["gpus"]) == 0
    text = capsys.readouterr().out.strip()
    match = NO_GPU.fullmatch(text)
    assert match, text
    assert match["reason"].strip()
    assert int(match["cores"]) == (psutil.cpu_count(logical=False) or psutil.cpu_count())


def test_json_for_real_is_valid_and_has_the_schema(capsys, real_nvml_absent):
    assert main(["gpus", "--json"]) == 0
    text = capsys.readouterr().out
    tool = subprocess.run([sys.executable, "-m", "json.tool"], input=text, capture_output=True, text=True)
    assert tool.returncode == 0, tool.stderr
    data = json.loads(text)
    assert set(data) == {"source", "reason", "driver", "cuda", "gpus", "cpu", "visible", "topology"}
    assert data["source"] == "none" and data["reason"] and data["gpus"] == [] and data["visible"] == []
    assert data["cpu"]["cores"] == (psutil.cpu_count(logical=False) or psutil.cpu_count())
    assert data["topology"] is None


def test_topology_without_nvml_says_so_and_exits_zero(capsys, real_nvml_absent):
    assert main(["gpus", "--topology"]) == 0
    assert "No GPU topology to show" in capsys.readouterr().out


def _rows(out: str, gpus: list[fake_pynvml.FakeGpu], bus_id=lambda bus: bus) -> dict[int, list[str]]:
    """Each GPU's table row as cells, found by its (unique) PCIe bus id."""
    lines = out.splitlines()
    return {i: next(line for line in lines if bus_id(gpu.bus_id) in line).split()
            for i, gpu in enumerate(gpus)}


def test_table_shows_fields_na_visibility_and_processes(capsys, monkeypatch):
    gpus = fake_pynvml.make_gpus(3)
    gpus[1].not_supported = {"nvmlDeviceGetTemperature"}
    gpus[0].processes = [(psutil.Process().pid, 512 * MIB)]
    _use_fake(monkeypatch, FakeNvml(gpus, not_supported={"nvmlDeviceGetPowerUsage"}))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "3 GPU(s) · driver 550.54.15 · CUDA 12.4" in out
    rows = _rows(out, gpus)
    # cells: #, NVIDIA, name, memory, util, temp, power, bus, cc, job, uuid
    assert rows[0] == ["0", "NVIDIA", "A100-SXM4-80GB", "1024/81920", "0%", "35C", "n/a/400",
                       "00000000:07:00.0", "8.0", "cuda:1", gpus[0].uuid]
    assert rows[1][4:6] == ["10%", "n/a"], "an unsupported temperature reads n/a, the rest of the row stays"
    assert rows[1][9] == "no" and rows[2][9] == "cuda:0"
    assert "GPU(s): 2, 0." in out
    me = psutil.Process()
    # the pid as the row's second cell: as a substring it also matches a GPU's UUID (pid 567 did, in CI)
    process_rows = [cells for cells in (line.split() for line in out.splitlines()) if cells[1:2] == [str(me.pid)]]
    assert process_rows == [["0", str(me.pid), me.username(), me.name(), "512", "MiB"]]


def test_table_fits_an_80_column_terminal(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    gpus = fake_pynvml.make_gpus(8)
    gpus[3].not_supported = {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates"}
    _use_fake(monkeypatch, FakeNvml(gpus))
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out, "no cell may be cut off"
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
    rows = _rows(out, gpus, bus_id=lambda bus: bus.replace("00000000:", ""))
    assert rows[0][:3] == ["0", "A100-SXM4-80GB", "1024/81920"]
    assert rows[3][2:4] == ["n/a", "n/a"]
    assert gpus[0].uuid not in out and "--json" in out


def test_table_without_processes_says_so(capsys, monkeypatch):
    _use_fake(monkeypatch, FakeNvml(2))
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "No running compute processes." in out and "CUDA_VISIBLE_DEVICES limits" not in out


def test_json_with_fake_and_topology(capsys, monkeypatch):
    _use_fake(monkeypatch, FakeNvml(4, nvlinks={(0, 1): 2}, not_supported={"nvmlDeviceGetPowerUsage"}))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert main(["gpus", "--json", "--topology"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "nvml" and data["reason"] is None
    assert [g["power_draw_w"] for g in data["gpus"]] == [None] * 4
    assert data["gpus"][0]["memory_total_mib"] == 81920
    assert data["visible"] == [3, 1]
    assert data["topology"]["gpus"] == [0, 1, 2, 3]
    assert data["topology"]["matrix"][0][:3] == ["X", "NV2", "PHB"]


def test_topology_table_and_legend(capsys, monkeypatch):
    _use_fake(monkeypatch, FakeNvml(2, nvlinks={(0, 1): 4}))
    assert main(["gpus", "--topology"]) == 0
    out = capsys.readouterr().out
    cells = [line.split() for line in out.split("Topology", 1)[1].splitlines()]
    assert ["GPU0", "GPU1"] in cells, "header row"
    assert ["GPU0", "X", "NV4"] in cells and ["GPU1", "NV4", "X"] in cells
    assert "Legend:" in out and "NV#" in out and "PHB " in out


def test_help_explains_output_and_schema(capsys):
    assert main(["gpus", "--help"]) == 0
    out = capsys.readouterr().out
    for word in ("CUDA_VISIBLE_DEVICES", "--json", "--topology", "memory_total_mib", "processes", "gloo"):
        assert word in out
