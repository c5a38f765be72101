"""Each plot is a real, readable PNG, also when nothing finished, and no figure is left open."""

from __future__ import annotations

import pytest

from tests.bench.sample_results import many_cells_results, noisy_base_results, sample_results

pytest.importorskip("matplotlib")

from paratrain.bench import plot_base, plots, plots_explain

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
    real_save = plots.save
    monkeypatch.setattr(plots, "save", lambda fig, plt_, path: (scales.append(fig.axes[0].get_yscale()),
                                                                   real_save(fig, plt_, path))[1])
    plots.plot_loss_curves(sample_results(), tmp_path)
    negative = sample_results({"single×1": {"losses": [-1.0, 0.5]}})
    _assert_png(plots.plot_loss_curves(negative, tmp_path))
    assert scales == ["log", "linear"]
    assert plt.get_fignums() == []


def _clashes(texts, renderer):
    """Pairs of visible, non-empty texts whose drawn boxes overlap (by more than a rounding error)."""
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_visible() and t.get_text()]
    return [(a, b) for i, (a, x) in enumerate(boxes) for b, y in boxes[i + 1:]
            if min(x.x1, y.x1) - max(x.x0, y.x0) > 0.5 and min(x.y1, y.y1) - max(x.y0, y.y0) > 0.5]


@pytest.mark.parametrize(("build", "values"), [(plots._throughput_figure, 16), (plots._step_times_figure, 0),
                                               (plots._memory_figure, 32), (plots_explain._breakdown_figure, 0)])
def test_sixteen_cells_leave_no_label_on_another(build, values):
    import matplotlib.pyplot as plt

    results = many_cells_results()
    assert len(results["cells"]) == 16
    fig = build(results)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        shown = []
        for ax in fig.axes:
            ticks = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
            assert _clashes(ticks, renderer) == []
            bar_values = [t for t in ax.texts if t.get_gid() == plot_base.VALUE and t.get_visible() and t.get_text()]
            assert _clashes(bar_values, renderer) == []
            shown += bar_values
            for text in ticks + bar_values:  # nothing cut off at the edge of the PNG
                box = text.get_window_extent(renderer)
                assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0
            for text in bar_values:  # values inside their axes, under the title
                assert text.get_window_extent(renderer).y1 <= ax.get_window_extent(renderer).y1
        labels = {t.get_text().replace("\n", "") for ax in fig.axes for t in ax.get_xticklabels() if t.get_text()}
        assert labels <= {c[k] for c in results["cells"] for k in ("key", "strategy")} and len(labels) >= 10
        assert len(shown) == values  # every bar's (memory: every cell's) value is written, none dropped
    finally:
        plt.close(fig)


def test_an_unreliable_efficiency_is_ringed_and_named_on_the_scaling_plot():
    import matplotlib.pyplot as plt

    fig = plots_explain._scaling_figure(noisy_base_results())  # fsdp×2 at 312 % against a noisy fsdp×1
    try:
        assert [t.get_text() for t in fig.axes[1].texts] == ["unreliable"]
        assert fig.axes[1].texts[0].xy == (2, pytest.approx(312.5))
    finally:
        plt.close(fig)


def test_the_memory_panel_says_in_words_what_its_peak_is():
    results = sample_results()
    for cell in results["cells"]:
        cell["peak_mem_kind"] = "rss_above_start"
    fig = plots._memory_figure(results)
    assert fig.axes[0].get_title() == "Peak memory per rank (RSS above the Session's start)"
    plot_base.pyplot().close(fig)


def test_cells_that_measured_different_peaks_say_which_on_their_tick():
    """A Keras cell's RSS beside torch cells' tensors is not the same measure: each tick names its kind."""
    results = sample_results()
    for i, cell in enumerate(results["cells"]):
        cell["peak_mem_kind"] = "rss_above_start" if i == 0 else "cpu_tensors"
    fig = plots._memory_figure(results)
    try:
        assert [bar.get_height() for bar in fig.axes[0].patches if bar.get_height() > 0]  # the bars are drawn
        ticks = [t.get_text() for t in fig.axes[-1].get_xticklabels()]
        assert ticks[0].endswith(" [RSS]") and all(t.endswith(" [tensors]") for t in ticks[1:] if t), ticks
        title = fig.axes[0].get_title()
        assert "not comparable" in title and "RSS: RSS above the Session's start" in title
    finally:
        plot_base.pyplot().close(fig)
