import pytest

from tests.helpers.equivalence import assert_equivalent, train
from tests.helpers.launch import EXAMPLES, check, paratrain

pytestmark = pytest.mark.multiprocess


# ×2 with AdamW, accumulation, an uneven last batch and a resumed checkpoint: tests/strategies/test_conformance.py
@pytest.mark.parametrize("nproc", [1, 4])
def test_ddp_matches_handwritten_at_other_world_sizes(tmp_path, reference, nproc):
    run = train("ddp", nproc, tmp_path, "sgd")
    assert_equivalent(reference("sgd"), run)


def test_seeded_shuffle_is_identical_across_world_sizes(tmp_path):
    one = train("single", 1, tmp_path / "one", "sgd", 100, "--shuffle")
    two = train("ddp", 2, tmp_path / "two", "sgd", 100, "--shuffle")
    assert_equivalent(one, two)


@pytest.mark.parametrize(("nproc", "samples"), [(4, 34)])
def test_uneven_last_batch_does_not_hang_and_keeps_the_math(tmp_path, reference, nproc, samples):
    # 37 % 8 = 5 -> chunks of 3 and 2; 34 % 8 = 2 -> two of four ranks get a zero-weight padding sample.
    run = train("ddp", nproc, tmp_path, "sgd", 40, "--samples", str(samples), "--batch-size", "8")
    # The per-step curve is the mean of per-rank means (unequal chunks), so compare the weights.
    assert_equivalent(reference("sgd", steps=40, samples=samples, batch_size=8), run, check_loss=False)


def test_native_torchrun_script_runs_unchanged(tmp_path, reference):
    check(paratrain("run", "-s", "ddp", "-n", "2", str(EXAMPLES / "handwritten" / "ddp.py"),
                    "--steps", "200", "--out", str(tmp_path)))
    assert_equivalent(reference("sgd"), tmp_path)
