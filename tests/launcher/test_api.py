"""`paratrain.launch`: a function on N real processes through torch's elastic agent, from a test and from a real
notebook run headless."""

from __future__ import annotations

import pytest

import paratrain
from paratrain.errors import ConfigError, ParatrainError
from paratrain.launcher.api import RankError
from tests.helpers import launch_fns
from tests.helpers.requirements import requires

pytestmark = pytest.mark.multiprocess


def test_returns_rank_zeros_value_with_the_options_applied():
    result = paratrain.launch(launch_fns.train, 5, strategy="ddp", nproc=2, grad_clip=1.0, seed=4)
    assert (result["rank"], result["world"], result["strategy"]) == (0, 2, "ddp")
    assert result["options"]["grad_clip"] == 1.0 and result["options"]["seed"] == 4
    single = paratrain.launch(launch_fns.train, 5, strategy="single", nproc=1)
    assert abs(single["loss"] - result["loss"]) < 1e-6  # the same training, one process or two


def test_an_exception_on_a_rank_is_raised_here_with_its_traceback():
    with pytest.raises(RankError) as info:
        paratrain.launch(launch_fns.fail_on_rank_one, strategy="ddp", nproc=2)
    assert info.value.rank == 1 and "ValueError: rank one cannot go on" in str(info.value)
    assert "fail_on_rank_one" in info.value.remote_traceback


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"nproc": 0}, "nproc=0 must be 1 or more"),
    ({"strategy": "single", "nproc": 2}, "single runs as one process"),
    ({"precison": "bf16-mixed"}, 'Did you mean "precision"'),
    ({"strategy": "fsdpp"}, 'unknown strategy "fsdpp"'),
    ({"strategy": "mirrored"}, "mirrored is a TensorFlow method; paratrain.launch starts PyTorch functions"),
])
def test_bad_arguments_fail_before_any_process_starts(kwargs, needle):
    with pytest.raises(ParatrainError, match=needle):
        paratrain.launch(launch_fns.train, 1, **kwargs)


def test_a_lambda_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="lambda or is defined inside another function"):
        paratrain.launch(lambda session: 1)


NOTEBOOK_CELLS = [
    '%%writefile train_fn.py\nimport torch\n\n'
    'def train(session, steps):\n'
    '    model, opt = session.prepare(torch.nn.Linear(2, 1), None)[:2]\n'
    '    return {"world": session.world_size, "steps": steps}\n',
    'import paratrain\nfrom train_fn import train\n'
    'result = paratrain.launch(train, 3, strategy="ddp", nproc=2)\nprint("RESULT", result)',
    'def inline(session):\n    return 1\n\n'
    'try:\n    paratrain.launch(inline, nproc=2)\nexcept paratrain.errors.ParatrainError as exc:\n'
    '    print("REFUSED", exc.one_line())',
]


@requires("nbclient", "nbformat", "ipykernel")
def test_from_a_real_notebook(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK_CELLS])
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for cell in nb.cells for o in cell.get("outputs", []))
    assert "RESULT {'world': 2, 'steps': 3}" in text
    assert "REFUSED inline is defined in a notebook" in text and "%%writefile" in text
