"""The communication analysis of profiler events: ring byte counts, and overlapped vs exposed time."""

from __future__ import annotations

from dataclasses import dataclass, field

from paratrain.breakdown import analyse, sent_bytes


@dataclass
class _Range:
    start: float
    end: float


@dataclass
class _Event:
    """The fields of torch.autograd.profiler_util.FunctionEvent that the analysis reads."""

    name: str
    thread: int
    start: float
    end: float
    input_shapes: list = field(default_factory=list)
    input_dtypes: list = field(default_factory=list)
    cpu_parent: object = None

    @property
    def time_range(self) -> _Range:
        return _Range(self.start, self.end)


def test_ring_bytes_per_collective():
    assert sent_bytes("all_reduce", [[1000]], ["float"], 2) == 4000  # 2(N-1)/N × 4000 bytes
    assert sent_bytes("all_reduce", [[1000]], ["float"], 4) == 6000
    assert sent_bytes("all_gather", [[250]], ["c10::BFloat16"], 4) == 1500  # (N-1) inputs of 500 bytes
    assert sent_bytes("reduce_scatter", [[1000]], ["float"], 4) == 3000
    assert sent_bytes("all_reduce", [[1000]], ["float"], 1) == 0


def test_exposed_is_the_communication_not_hidden_behind_compute():
    events = [
        _Event("aten::mm", 1, 0, 40), _Event("aten::addmm", 1, 50, 90),      # main thread computes 0-40, 50-90
        _Event("aten::view", 1, 10, 12, cpu_parent=object()),                # nested: not counted twice
        _Event("gloo:all_reduce", 7, 30, 70, [[1000]], ["float"]),           # 30-40 and 50-70 overlap compute
        _Event("gloo:all_reduce", 7, 95, 105, [[500]], ["float"]),           # fully exposed
    ]
    out = analyse(events, world=2, steps=1)
    assert out["comm_bytes_per_step"] == 4000 + 2000
    assert abs(out["comm_total_s"] - 50e-6) < 1e-12
    assert abs(out["comm_overlapped_s"] - 30e-6) < 1e-12
    assert abs(out["comm_exposed_s"] - 20e-6) < 1e-12
    assert out["collectives_per_step"] == {"all_reduce": 2.0}
