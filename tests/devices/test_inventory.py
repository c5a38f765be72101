"""Inventory: the real CPU-only path on this machine, the NVML path against the fake, CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import json

import psutil
import pytest

from paratrain.devices import inventory
from paratrain.devices.inventory import collect, parse_visible_devices
from tests.helpers import fake_pynvml
from tests.helpers.fake_pynvml import FakeNvml

MIB = 1 << 20
GPU_KEYS = ["index", "name", "uuid", "driver", "cuda", "memory_total_mib", "memory_used_mib",
            "memory_free_mib", "utilization_pct", "temperature_c", "power_draw_w", "power_limit_w",
            "pci_bus_id", "compute_capability", "visible", "processes"]


def _real_nvml_works() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def _dead_pid() -> int:
    pid = 4_194_304 + 12345  # above Linux's pid_max, so it cannot exist
    assert not psutil.pid_exists(pid)
    return pid


# --- the real machine (no GPU) --------------------------------------------------------------------

def test_real_machine_without_nvml_reports_none_with_reason():
    if _real_nvml_works():
        pytest.skip("NVML works on this machine; the no-GPU path cannot be observed for real")
    inv = collect(env={})
    assert inv.source == "none"
    assert inv.gpus == [] and inv.visible == []
    assert inv.nvml_reason  # the NVML error text, e.g. "NVML Shared Library Not Found"
    assert inv.reason.startswith(f"NVML: {inv.nvml_reason}; torch: ")
    assert inv.cpu.cores == (psutil.cpu_count(logical=False) or psutil.cpu_count())
    assert inv.cpu.logical_cores == psutil.cpu_count()
    assert inv.cpu.memory_gib == round(psutil.virtual_memory().total / 2**30, 1)


def test_nvml_init_failure_falls_back_and_keeps_nvml_text():
    fake = FakeNvml(init_error=fake_pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    inv = collect(fake, env={})
    assert inv.source == "none"  # torch here is a CPU build, so it has no GPU either
    assert inv.nvml_reason == "Driver Not Loaded"
    assert "torch" in inv.reason.split(";", 1)[1]


def test_torch_probe_here_says_why_it_has_no_gpu():
    with pytest.raises(inventory.SourceUnavailable, match="torch"):
        inventory.probe_torch()


# --- NVML path against the fake -------------------------------------------------------------------

def test_nvml_fields_are_converted_to_documented_units():
    fake = FakeNvml(2)
    inv = collect(fake, env={})
    assert inv.source == "nvml" and inv.reason is None
    assert (inv.driver, inv.cuda) == ("550.54.15", "12.4")
    first = inv.gpus[0]
    assert first.name == "NVIDIA A100-SXM4-80GB"
    assert first.uuid == fake.gpus[0].uuid
    assert (first.memory_total_mib, first.memory_used_mib, first.memory_free_mib) == (81920, 1024, 80896)
    assert (first.power_draw_w, first.power_limit_w) == (87.7, 400.0)
    assert first.compute_capability == "8.0"
    assert first.pci_bus_id == "00000000:07:00.0"
    assert (first.driver, first.cuda) == ("550.54.15", "12.4")
    assert inv.gpus[1].utilization_pct == 10 and inv.gpus[1].temperature_c == 36
    assert fake.init_count == 0, "nvmlShutdown must balance nvmlInit"


def test_not_supported_fields_become_none_without_hiding_the_rest():
    gpus = fake_pynvml.make_gpus(3)
    gpus[1].not_supported = {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetCudaComputeCapability"}
    fake = FakeNvml(gpus, not_supported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature",
                                         "nvmlSystemGetDriverVersion"})
    inv = collect(fake, env={})
    assert inv.driver is None and inv.cuda == "12.4"
    assert all(g.power_draw_w is None and g.temperature_c is None for g in inv.gpus)
    assert all(g.power_limit_w == 400.0 for g in inv.gpus)
    assert inv.gpus[1].memory_total_mib is None and inv.gpus[1].compute_capability is None
    assert inv.gpus[0].memory_total_mib == 81920 and inv.gpus[2].compute_capability == "8.0"
    data = inv.to_json()["gpus"][1]
    assert data["memory_used_mib"] is None and data["temperature_c"] is None


def test_gpu_whose_handle_fails_is_still_listed():
    fake = FakeNvml(2, not_supported={"nvmlDeviceGetHandleByIndex"})
    inv = collect(fake, env={})
    assert [g.index for g in inv.gpus] == [0, 1]
    assert inv.gpus[0].name is None and inv.gpus[0].driver == "550.54.15"


def test_processes_get_user_and_name_and_tolerate_missing_ones():
    me = psutil.Process()
    gpus = fake_pynvml.make_gpus(2)
    gpus[0].processes = [(me.pid, 512 * MIB), (_dead_pid(), None), (me.pid, 512 * MIB)]
    inv = collect(FakeNvml(gpus), env={})
    procs = inv.gpus[0].processes
    assert len(procs) == 2, "a pid listed twice by NVML is one process"
    assert (procs[0].pid, procs[0].user, procs[0].name, procs[0].memory_mib) == (
        me.pid, me.username(), me.name(), 512)
    assert (procs[1].user, procs[1].name, procs[1].memory_mib) == (None, None, None)
    assert inv.gpus[1].processes == []


def test_access_denied_keeps_pid_and_memory(monkeypatch):
    def denied(pid: int) -> psutil.Process:
        raise psutil.AccessDenied(pid)

    monkeypatch.setattr(inventory.psutil, "Process", denied)
    gpus = fake_pynvml.make_gpus(1)
    gpus[0].processes = [(1, 256 * MIB)]
    proc = collect(FakeNvml(gpus), env={}).gpus[0].processes[0]
    assert (proc.pid, proc.user, proc.name, proc.memory_mib) == (1, None, None, 256)


def test_to_json_has_exactly_the_documented_schema():
    data = collect(FakeNvml(2), env={"CUDA_VISIBLE_DEVICES": "1"}).to_json()
    json.loads(json.dumps(data))
    assert list(data) == ["source", "reason", "driver", "cuda", "gpus", "cpu", "visible", "topology"]
    assert list(data["gpus"][0]) == GPU_KEYS
    assert list(data["cpu"]) == ["cores", "logical_cores", "memory_gib"]
    assert data["visible"] == [1] and [g["visible"] for g in data["gpus"]] == [False, True]
    assert data["topology"] is None


def test_nvml_with_zero_gpus_is_treated_as_no_gpu():
    inv = collect(FakeNvml(0), env={})
    assert inv.source == "none" and inv.nvml_reason == "NVML reports 0 GPUs"


# --- CUDA_VISIBLE_DEVICES -------------------------------------------------------------------------

UUIDS = ["GPU-aaa1", "GPU-aab2", "GPU-bbb3", "GPU-ccc4"]


@pytest.mark.parametrize(("value", "expected"), [
    (None, [0, 1, 2, 3]),
    ("2,0", [2, 0]),
    (" 1 , 3", [1, 3]),
    ("", []),
    ("-1", []),
    ("NoDevFiles", []),
    ("1,x,2", [1]),  # stops at the first invalid entry, like CUDA
    ("0,1,7,2", [0, 1]),  # an index past the last GPU is invalid too
    ("0,0", []),  # a repeated device empties the list
    ("1gpu", [1]),  # strtoul semantics
    ("GPU-bbb3,GPU-aaa1", [2, 0]),
    ("GPU-c", [3]),  # unique prefix
    ("GPU-aa", []),  # ambiguous prefix is invalid
    ("GPU-aab2,GPU-zzz,GPU-ccc4", [1]),
    ("GPU-aaa1,2", [0]),  # a list that starts with UUIDs takes only UUIDs
    ("MIG-1234", []),
])
def test_parse_visible_devices(value, expected):
    assert parse_visible_devices(value, UUIDS) == expected


def test_collect_marks_visible_gpus_by_uuid():
    fake = FakeNvml(3)
    inv = collect(fake, env={"CUDA_VISIBLE_DEVICES": f"{fake.gpus[2].uuid},{fake.gpus[0].uuid[:8]}"})
    assert inv.visible == [2, 0]
    assert [g.visible for g in inv.gpus] == [True, False, True]
