"""The recommendation, the table and the report files, against the fixed sample in sample_results.py."""

from __future__ import annotations

import csv
import json
import sys

from rich.console import Console

from paratrain.bench import report
from paratrain.bench.recommend import efficiency_base, efficiency_note, recommend
from paratrain.bench.report import diff_markdown, diff_rows, diff_table, results_table, write_outputs
from tests.bench.sample_results import noisy_base_results, sample_results


def _render(renderable) -> str:
    console = Console(record=True, width=250, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_winner_is_the_fastest_equivalent_cell():
    assert recommend(sample_results())["winner"] == "ddp×2"


def test_a_faster_but_non_equivalent_cell_never_wins():
    rec = recommend(sample_results({"fsdp×2": {"samples_per_s": 2500.0}}))
    assert rec["winner"] == "ddp×2"
    assert any(line.startswith("fsdp×2: NOT EQUIVALENT") and "1.3× ddp×2" in line for line in rec["lines"])


def test_lines_are_grounded_in_numbers():
    lines = recommend(sample_results())["lines"]
    assert lines[0].startswith("Use ddp×2: 1,900 samples/s, 1.9× single×1 throughput, 95 % scaling efficiency")
    assert "fsdp×2 holds 45 % less model state per rank than ddp×2 (0.82 vs 1.50 MiB)" in "\n".join(lines)
    assert "deepspeed:zero=2×2 failed: worker 1 exited with code 1: RuntimeError" in "\n".join(lines)
    assert any(line.startswith("horovod×2 unavailable: horovod is not installed") for line in lines)


def test_an_equivalent_slower_cell_says_equal_loss_and_its_speed():
    lines = recommend(sample_results({"fsdp×2": {"loss_max_abs_diff": 1e-7}}))["lines"]
    assert "fsdp×2: equal loss but 0.8× ddp×2 speed at this size, 76 % scaling efficiency." in lines
    assert not any("NOT EQUIVALENT" in line for line in lines)


def test_single_process_winner_says_parallel_did_not_pay_off():
    rec = recommend(sample_results({"ddp×2": {"samples_per_s": 800.0, "scaling_efficiency": 0.4},
                                    "ddp×1": {"samples_per_s": 900.0}}))
    assert rec["winner"] == "single×1"
    assert rec["lines"][0].startswith("Use single×1: 1,000 samples/s.")
    assert "No parallel method beat one process" in rec["lines"][0]
    assert "ddp×2: equal loss but 0.8× single×1 speed at this size, 40 % scaling efficiency." in rec["lines"]


def test_no_ok_cells_means_no_winner_and_every_reason():
    results = sample_results()
    results["cells"] = [c for c in results["cells"] if c["status"] != "ok"]
    rec = recommend(results)
    assert rec["winner"] is None
    assert rec["lines"][0] == "No recommendation: no method finished; the reasons are below."
    assert len(rec["lines"]) == 3


def test_every_ok_cell_flagged_means_no_winner():
    results = sample_results({"ddp×1": {"loss_max_abs_diff": 1.0}, "ddp×2": {"loss_max_abs_diff": 1.0},
                              "single×1": {"status": "failed", "error": "boom"}})
    assert recommend(results)["winner"] is None
    assert recommend(results)["lines"][0].startswith("No recommendation: every method that finished")


def test_only_one_cell():
    results = sample_results()
    results["cells"] = results["cells"][:1]
    rec = recommend(results)
    assert rec["winner"] == "single×1"
    assert rec["lines"][-1] == "Only one method ran (single×1); pass more with --strategies to compare."


def test_missing_single_reference():
    results = sample_results(reference=None)
    results["cells"] = [dict(c, loss_max_abs_diff=None) for c in results["cells"] if c["nproc"] == 2]
    rec = recommend(results)
    assert rec["winner"] == "ddp×2"  # fsdp×2's diff is unknown, not flagged, but slower
    assert any("No single-process reference finished" in line for line in rec["lines"])
    assert "throughput" not in rec["lines"][0]  # no speed-up claimed without a baseline


def test_no_cells_at_all():
    assert recommend(sample_results(cells=[])) == {"winner": None,
                                                   "lines": ["No methods were run, so there is nothing to compare."]}


def test_table_sorted_starred_and_flagged_red():
    table = results_table(sample_results())
    methods = list(table.columns[0].cells)
    assert methods[0] == "[bold green]★ ddp×2[/]"
    assert methods[1:] == ["fsdp×2", "single×1", "ddp×1", "deepspeed:zero=2×2", "horovod×2"]
    diffs = list(table.columns[10].cells)
    assert diffs[1] == "[bold red]3.0e-03[/]" and diffs[2] == "ref" and diffs[0] == "2.0e-07"
    text = _render(table)
    assert "unavailable: horovod is not installed" in text and "failed: worker 1 exited" in text
    assert "ok, NOT EQUIVALENT" in text


def test_write_outputs(tmp_path):
    results = sample_results()
    paths = write_outputs(results, tmp_path / "out")
    assert {"json", "csv", "report", "throughput", "step_times", "memory", "loss_curves"} <= set(paths)
    saved = json.loads(paths["json"].read_text())
    assert saved["recommendation"]["winner"] == "ddp×2" and results["recommendation"] == saved["recommendation"]
    with paths["csv"].open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == [*report.CSV_FIELDS, "extra_accuracy"]
    assert len(rows) == 1 + 6 and rows[1][0] == "ddp×2" and rows[1][rows[0].index("winner")] == "True"
    md = paths["report"].read_text()
    assert "- fsdp×2: max |Δloss| 3.0e-03 — **NOT EQUIVALENT**" in md
    assert "- ddp×2: max |Δloss| 2.0e-07 — equivalent" in md
    assert "**3.0e-03 NOT EQUIVALENT**" in md  # in the table too
    assert "![loss curves](loss_curves.png)" in md
    assert "- CPU: 16 cores (32 logical), 125.7 GiB RAM" in md and "- GPUs: none" in md
    assert ("paratrain compare --workload mlp --strategies single,ddp,fsdp,deepspeed:zero=2,horovod --nproc 1,2 "
            "--steps 150 --warmup 10 --repeat 1 --scaling strong\n") in md


def test_report_without_matplotlib_says_how_to_get_plots(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    paths = write_outputs(sample_results(), tmp_path)
    assert 'pip install "paratrain[plots]"' in paths["report"].read_text()
    assert not list(tmp_path.glob("*.png")) and "throughput" not in paths


def test_environment_lists_gpus_and_script_reproduction(tmp_path):
    gpu = {"name": "NVIDIA H100", "memory_total_mib": 81559}
    results = sample_results()
    results["env"]["inventory"].update(source="nvml", reason=None, gpus=[gpu, gpu])
    results["settings"].update(workload=None, script="train.py", script_args=["--lr", "3e-4"])
    md = write_outputs(results, tmp_path)["report"].read_text()
    assert "- GPUs: 2 × NVIDIA H100 (81559 MiB)" in md
    assert "paratrain compare --script train.py --script-args '--lr 3e-4' --strategies" in md
    results["settings"].update(activation_checkpointing=True, precision="bf16-mixed")
    again = report.reproduce_command(results)
    assert "--activation-checkpointing" in again and "--precision bf16-mixed" in again
    results["settings"].update(activation_checkpointing="every:2")
    assert "--activation-checkpointing every:2" in report.reproduce_command(results)


def _run_b():
    b = sample_results({"ddp×2": {"samples_per_s": 2850.0}, "fsdp×2": {"status": "failed", "error": "OOM"}},
                       id="compare-20261203-100000")
    b["cells"].append(dict(b["cells"][2], key="dp×2", strategy="dp"))
    return b


def test_diff_ratios_and_status_changes():
    rows = {r["key"]: r for r in diff_rows(sample_results(), _run_b())}
    assert len(rows) == 7
    assert rows["ddp×2"]["ratio"] == 1.5 and rows["single×1"]["ratio"] == 1.0
    assert (rows["fsdp×2"]["status_a"], rows["fsdp×2"]["status_b"], rows["fsdp×2"]["ratio"]) == ("ok", "failed", None)
    assert rows["dp×2"]["status_a"] == "absent" and rows["dp×2"]["samples_per_s_a"] is None
    md = diff_markdown(sample_results(), _run_b())
    assert "| ddp×2 | 1,900.0 | 2,850.0 | 1.50× |" in md and "ok → failed" in md and "absent → ok" in md
    text = _render(diff_table(sample_results(), _run_b()))
    assert "1.50×" in text and "compare-20261203-100000" in text


def test_a_cell_killed_before_its_summary_still_renders(tmp_path):
    # A rank killed by a timeout or OOM writes no memory summary: its entries are None, not numbers.
    results = sample_results(cell_changes={"deepspeed:zero=2×2": {"peak_mem_bytes": [None, None],
                                                                   "state_bytes": [1024, None]}})
    paths = write_outputs(results, tmp_path)
    assert paths["report"].read_text().count("deepspeed:zero=2×2") >= 1
    assert "failed" in _render(results_table(results))


def test_a_simpler_method_within_noise_of_the_fastest_wins():
    # ddp×1 2 % faster than the one-process reference is noise, not a reason to switch; ddp×2 is slower here.
    results = sample_results(cell_changes={"ddp×1": {"samples_per_s": 1020.0}, "ddp×2": {"samples_per_s": 900.0},
                                           "fsdp×2": {"samples_per_s": 800.0}})
    assert recommend(results)["winner"] == "single×1"
    results = sample_results(cell_changes={"ddp×1": {"samples_per_s": 1020.0}, "ddp×2": {"samples_per_s": 1200.0},
                                           "fsdp×2": {"samples_per_s": 800.0}})
    assert recommend(results)["winner"] == "ddp×2"
    # at one process ddp runs single's computation plus its reducer: even 20 % ahead, it measured noise
    results = sample_results(cell_changes={"ddp×1": {"samples_per_s": 1200.0}, "ddp×2": {"samples_per_s": 900.0},
                                           "fsdp×2": {"samples_per_s": 800.0}})
    assert recommend(results)["winner"] == "single×1"


def test_threads_are_shown_and_an_oversubscribed_cell_is_flagged_in_table_and_words():
    results = sample_results({"single×1": {"threads_per_process": 2},
                              "ddp×2": {"threads_per_process": 1, "oversubscribed": True}})
    results["env"]["cores"] = 1
    text = _render(results_table(results))
    assert "2 × 1 oversubscribed" in text and "1 × 2" in text
    lines = recommend(results)["lines"]
    assert "ddp×2 ran oversubscribed (2 processes × 1 thread(s) on 1 cores)" in "\n".join(lines)
    assert "oversubscribed" not in _render(results_table(sample_results()))  # older results: no thread column data


def test_results_from_before_the_breakdown_still_render(tmp_path):
    old = sample_results()  # no breakdown, comm bytes or tolerance fields: a history row from an older paratrain
    paths = write_outputs(old, tmp_path)
    text = paths["report"].read_text()
    assert "## Where the time goes" in text and "No cell recorded a breakdown" in text
    assert not any("exposed" in line for line in old["recommendation"]["lines"])


def test_a_communication_bound_cell_is_explained_in_words():
    results = sample_results(cell_changes={"fsdp×2": {
        "breakdown": {"compute_s": 0.01, "comm_exposed_s": 0.03, "comm_total_s": 0.03, "data_s": 0.0,
                      "optimizer_s": 0.0, "other_s": 0.0, "step_s": 0.04},
        "comm_share": 0.75, "comm_bytes_per_step": 8_000_000, "bus_gbps": 0.27,
        "collectives_per_step": {"all_gather": 2.0, "all_reduce": 1.0}}})
    lines = recommend(results)["lines"]
    assert any(line.startswith("fsdp×2 spends 75 % of each step in exposed all-gather (8.00 MB per step at 0.27 GB/s)")
               for line in lines)


def test_repeat_spread_makes_a_tie_and_says_so():
    # ddp×2 is 1900 samples/s in the sample; make single×1 10 % slower, but with repeats spread by 15 %.
    results = sample_results(cell_changes={
        "single×1": {"samples_per_s": 1730.0, "repeat_samples_per_s": [1600.0, 1730.0, 1860.0]},
        "ddp×2": {"repeat_samples_per_s": [1800.0, 1900.0, 1950.0]}})
    rec = recommend(results)
    assert rec["winner"] == "single×1"
    assert any("ddp×2 measured 1.1× single×1, within run-to-run noise (±15 %, the widest spread --repeat measured): "
               "a tie" in line for line in rec["lines"])
    assert recommend(sample_results())["winner"] == "ddp×2"  # without the spread, 10 % is a real difference


def _timed(key, median_s, p90_s, eff=None, nproc=1):
    return {"key": key, "nproc": nproc, "step_time_median_s": median_s, "step_time_p90_s": p90_s,
            "scaling_efficiency": eff}


def test_efficiency_note_says_why_an_efficiency_is_not_to_be_trusted():
    quiet, noisy = _timed("fsdp×1", 0.10, 0.11), _timed("fsdp×1", 0.10, 0.40)
    assert efficiency_note(_timed("fsdp×2", 0.06, 0.07, 0.85, 2), quiet) is None
    assert efficiency_note(_timed("fsdp×2", 0.02, 0.03, 3.13, 2), noisy) == (
        "unreliable: above 100 % — the 1-process base fsdp×1 was noisy (p90 step 4.0× its median), so its "
        "throughput is likely understated")
    # Above 100 % on a quiet base is still not believed, and says what it suggests instead.
    assert efficiency_note(_timed("fsdp×2", 0.04, 0.05, 1.2, 2), quiet) == (
        "unreliable: above 100 % — 2 processes should not each run faster than fsdp×1 alone, so fsdp×1 was probably "
        "measured slow")
    assert efficiency_note(_timed("fsdp×2", 0.06, 0.07, 0.8, 2), noisy) == (
        "unreliable: the 1-process base fsdp×1 was noisy (p90 step 4.0× its median), so its throughput is likely "
        "understated, and this efficiency overstated")
    assert efficiency_note(noisy | {"scaling_efficiency": 1.0}, noisy) is None  # its own base
    assert efficiency_note(_timed("fsdp×2", 0.06, 0.07, None, 2), noisy) is None  # not measured


def test_efficiency_base_is_the_same_method_on_one_process_else_the_reference():
    results = noisy_base_results()
    cells = {c["key"]: c for c in results["cells"]}
    assert efficiency_base(cells["fsdp×2"], results)["key"] == "fsdp×1"
    del results["cells"][4]  # no fsdp×1: finalize measured fsdp×2 against single×1
    assert efficiency_base(cells["fsdp×2"], results)["key"] == "single×1"


def test_an_unreliable_efficiency_is_flagged_everywhere_and_never_cited_as_a_merit(tmp_path):
    results = noisy_base_results()  # fsdp×2 wins at 312 %, measured against a noisy fsdp×1
    why = ("312 % as measured, is unreliable: above 100 % — the 1-process base fsdp×1 was noisy (p90 step 4.0× its "
           "median), so its throughput is likely understated.")
    lines = recommend(results)["lines"]
    assert lines[0].startswith("Use fsdp×2: 2,000 samples/s, 2× single×1 throughput, 12 % of step time")
    assert "312 % scaling efficiency" not in lines[0] and lines[0].endswith(f"Its scaling efficiency, {why}")
    assert "ddp×2: equal loss but 0.95× fsdp×2 speed at this size, 95 % scaling efficiency." in lines
    assert any(line.startswith("fsdp×1's steps were noisy (p90 step 4.0× its median)") for line in lines)
    table = results_table(results)
    assert list(table.columns[report.EFF_COLUMN].cells)[:2] == ["[yellow]312 % (unreliable)[/]", "95 %"]
    assert "Scaling eff of fsdp×2, 312 %, is unreliable: above 100 % — the 1-process base fsdp×1 was noisy" in (
        _render(table))
    paths = write_outputs(results, tmp_path)
    md = paths["report"].read_text()
    assert "| 312 % (unreliable) |" in md and "Scaling eff of fsdp×2, 312 %, is unreliable: above 100 %" in md
    saved = {c["key"]: c for c in json.loads(paths["json"].read_text())["cells"]}
    assert saved["fsdp×2"]["scaling_efficiency_note"].startswith("unreliable: above 100 %")
    assert saved["ddp×2"]["scaling_efficiency_note"] is None
    with paths["csv"].open(newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["key"] == "fsdp×2")
    assert row["scaling_efficiency_note"].startswith("unreliable: above 100 %")


def test_a_quiet_comparison_has_no_efficiency_caveat():
    results = sample_results()
    assert not any("unreliable" in line or "noisy" in line for line in recommend(results)["lines"])
    assert "unreliable" not in _render(results_table(results))
