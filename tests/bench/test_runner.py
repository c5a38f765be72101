"""compare's live step count follows rank 0's record as it grows, without re-reading it."""

from paratrain.bench.runner import _StepCounter


def test_step_count_reads_only_what_was_appended(tmp_path):
    record = tmp_path / "rank0.jsonl"
    count = _StepCounter(record)
    assert count() == 0  # not written yet
    record.write_text('{"state": {"threads": 2}}\n{"step": 1, "dt": 0.1}\n{"step": 2, "d')
    assert count() == 1  # the half-written line waits for its end
    with record.open("a") as fh:
        fh.write('t": 0.1}\n{"step": 3, "dt": 0.1}\n')
    assert count() == 3
    assert count.offset == record.stat().st_size
