"""Each plot is a real, readable PNG, also when nothing finished, and no figure is left open."""

from __future__ import annotations

import pytest

from tests.bench.sample_results import sample_results

pytest.importorskip("matplotlib")

from paratrain.bench import plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _assert_png(path):
    from matplotlib import image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    height, width = image.imread(path).shape[:2]
    assert height > 0 and width > 0


def test_plot_all_writes_every_valid_png_and_closes_figures(tmp_path):
    import matplotlib.pyplot as plt

    paths = plots.plot_all(sample_results(), tmp_path / "nested")
    assert [p.name for p in paths] == ["throughput.png", "step_times.png", "memory.png", "loss_curves.png",
                                       "breakdown.png", "scaling.png"]
    for path in paths:
        _assert_png(path)
    assert plt.get_fignums() == []
    assert plt.get_backend().lower() == "agg"


def test_plots_still_written_when_no_cell_finished(tmp_path):
    results = sample_results()
    results["cells"] = [c for c in results["cells"] if c["status"] != "ok"]
    for path in plots.plot_all(results, tmp_path):
        _assert_png(path)


def test_loss_curves_log_scale_only_for_positive_losses(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    scales = []
    real_save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, plt_, path: (scales.append(fig.axes[0].get_yscale()),
                                                                   real_save(fig, plt_, path))[1])
    plots.plot_loss_curves(sample_results(), tmp_path)
    negative = sample_results({"single×1": {"losses": [-1.0, 0.5]}})
    _assert_png(plots.plot_loss_curves(negative, tmp_path))
    assert scales == ["log", "linear"]
    assert plt.get_fignums() == []
