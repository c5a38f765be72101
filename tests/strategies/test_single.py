import pytest

from tests.helpers.equivalence import assert_equivalent, train

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_single_matches_handwritten(tmp_path, reference, optimizer):
    run = train("single", 1, tmp_path, optimizer)
    assert_equivalent(reference(optimizer), run)
