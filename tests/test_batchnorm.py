"""BatchNorm under several processes: SyncBatchNorm where it can run (GPUs), the model untouched and one notice
where it cannot (CPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from paratrain import batchnorm
from paratrain.model_facts import model_facts
from tests.helpers.launch import ROOT, check, paratrain

SCRIPT = str(ROOT / "tests" / "helpers" / "scripts" / "noisy_models.py")


def _bn_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.BatchNorm1d(144))


def test_converted_on_gpus_for_multi_process_methods_keeping_the_optimizers_parameters(capsys):
    model = _bn_model()
    params = {id(p) for p in model.parameters()}
    out = batchnorm.convert(model, multi_process=True, world_size=2, device_type="cuda", enabled=True, is_main=True)
    assert [type(m).__name__ for m in out.modules()].count("SyncBatchNorm") == 2
    assert {id(p) for p in out.parameters()} == params  # an optimizer built before prepare() stays valid
    assert model_facts(out)["batchnorm"] == [] and model_facts(out)["sync_batchnorm"] is True
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("multi", "world", "device", "enabled", "training", "notice"), [
    (True, 2, "cpu", True, True, "SyncBatchNorm needs GPUs"),   # CPU: cannot sync, says so
    (True, 2, "cuda", False, True, "--no-sync-batchnorm"),      # turned off: per-rank statistics, said once
    (True, 1, "cuda", True, True, None),                        # one process: nothing to synchronise
    (False, 2, "cuda", True, True, None),                       # dp: replicas inside one process
    (True, 2, "cpu", True, False, None),                        # evaluation only: running statistics are read
])
def test_left_alone_elsewhere(capsys, multi, world, device, enabled, training, notice):
    model = _bn_model()
    out = batchnorm.convert(model, multi_process=multi, world_size=world, device_type=device, enabled=enabled,
                            is_main=True, training=training)
    assert out is model and not any(isinstance(m, nn.SyncBatchNorm) for m in out.modules())
    err = capsys.readouterr().err
    if notice is None:
        assert err == ""
    else:
        assert notice in err and "BatchNorm2d, BatchNorm1d" in err


def test_model_facts_name_what_makes_losses_differ():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Dropout(0.1), nn.Dropout(0.1), nn.Dropout(0.0))
    assert model_facts(model) == {"dropout": ["Dropout(p=0.1) ×2"], "batchnorm": ["BatchNorm2d"],
                                  "sync_batchnorm": False, "conv": True}


@pytest.mark.multiprocess
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="SyncBatchNorm needs 2 GPUs (DDP refuses it on CPU)")
def test_sync_batchnorm_on_two_gpus_matches_one_process(tmp_path):
    """Where GPUs exist: ddp×2 of a BatchNorm CNN is judged exact against one process — the per-rank statistics are
    gone (on CPU the same comparison is only within noise, tests/bench/test_equivalence.py)."""
    import json

    proc = check(paratrain("compare", "--script", SCRIPT, "--script-args", "--model bn", "--strategies", "single,ddp",
                           "--nproc", "2", "--warmup", "2", "--out", str(tmp_path / "out"), "--json", timeout=600))
    cells = {c["key"]: c for c in json.loads(proc.stdout)["cells"]}
    assert cells["ddp×2"]["model"]["sync_batchnorm"] is True
    assert cells["ddp×2"]["equivalence"] == "exact", cells["ddp×2"]["equivalence_reason"]
