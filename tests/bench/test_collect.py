"""Aggregating the per-rank records a measured run writes (the files are the Session's own format)."""

from __future__ import annotations

import json

from paratrain.bench.collect import summarize


def _write(folder, rank, losses, dt=0.01):
    lines = [{"step": i + 1, "t": 100.0 + i, "dt": dt, "loss": loss, "samples": 8,
              "phases": {"data": 0.001, "forward": 0.003, "backward": 0.004, "optimizer": 0.001}}
             for i, loss in enumerate(losses)]
    (folder / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_final_loss_is_smoothed_over_the_last_tenth_of_the_steps(tmp_path):
    losses = [1.0] * 80 + [0.5, 0.7] * 10  # the last 10 steps alternate: one batch would say 0.7
    _write(tmp_path, 0, losses)  # the global loss is the mean of the ranks' records
    _write(tmp_path, 1, losses)
    out = summarize(tmp_path, warmup=5, launch_time=99.0, tokens_per_sample=None)
    assert abs(out["final_loss"] - 0.6) < 1e-9
    assert out["breakdown"]["data_s"] > 0 and out["comm_bytes_per_step"] is None  # no profile in this run


def test_communication_the_profiler_could_not_see_is_none_not_zero(tmp_path):
    """Horovod's collectives are invisible to the torch profiler: the cell's communication is unknown, and the
    report and the breakdown table say "not measured" rather than 0 MB and 0 %."""
    from paratrain.bench.explain import breakdown_markdown
    from paratrain.breakdown import not_measured

    for rank in (0, 1):
        _write(tmp_path, rank, [1.0] * 20)
        profile = not_measured({"comm_total_s": 0.0, "comm_exposed_s": 0.0, "comm_overlapped_s": 0.0,
                                "comm_bytes_per_step": 0, "collectives_per_step": {}})
        lines = [json.loads(x) for x in (tmp_path / f"rank{rank}.jsonl").read_text().splitlines()]
        for record in lines[10:13]:
            record["profiled"] = True
        lines.insert(13, {"profile": profile})
        (tmp_path / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = summarize(tmp_path, warmup=5, launch_time=99.0, tokens_per_sample=None)
    assert out["comm_bytes_per_step"] is None and out["comm_share"] is None and out["comm_measured"] is False
    assert out["breakdown"]["comm_exposed_s"] is None and out["breakdown"]["compute_s"] > 0
    cell = {"key": "horovod×2", "status": "ok", "nproc": 2, **out}
    row = next(line for line in breakdown_markdown({"cells": [cell]}) if line.startswith("| horovod×2"))
    assert "not measured" in row and "0.00" not in row, row


def test_a_gpu_rank_reports_allocated_and_reserved_peaks(tmp_path):
    """On GPUs each rank's summary carries CUDA's max allocated and max reserved (metrics.StepRecorder): the cell's
    peak is the allocated one, and the caching allocator's peak is kept beside it for advise's reserved figure. On a
    CPU there is no reserved figure and the key is absent."""
    for rank, (allocated, reserved) in enumerate(((100, 140), (90, 150))):
        _write(tmp_path, rank, [1.0] * 12)
        summary = {"summary": True, "peak_rss_bytes": 10, "peak_rss_above_start_bytes": 5, "t": 200.0,
                   "cuda_max_allocated_bytes": allocated, "cuda_max_reserved_bytes": reserved}
        with (tmp_path / f"rank{rank}.jsonl").open("a") as fh:
            fh.write(json.dumps(summary) + "\n")
    out = summarize(tmp_path, warmup=2, launch_time=99.0, tokens_per_sample=None)
    assert (out["peak_mem_kind"], out["peak_mem_bytes"], out["peak_reserved_bytes"]) == ("cuda", [100, 90], [140, 150])
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    _write(cpu, 0, [1.0] * 12)
    assert "peak_reserved_bytes" not in summarize(cpu, warmup=2, launch_time=99.0, tokens_per_sample=None)
