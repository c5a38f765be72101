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
