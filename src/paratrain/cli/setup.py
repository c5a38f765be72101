"""`paratrain setup BACKEND`: install a backend that plain `pip install` cannot (Horovod: a patched, cached build)."""

from __future__ import annotations

import typer

from paratrain import console
from paratrain.errors import ConfigError

BACKENDS = ("horovod",)


def setup(
    backend: str = typer.Argument(..., help="What to install: horovod."),
    force: bool = typer.Option(False, "--force", help="Reinstall even when a matching build is installed."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build again, ignoring the cached wheel."),
) -> None:
    """Install Horovod 0.28.1 for the installed torch: fetch the source, apply paratrain's build fixes, compile
    (several minutes on a few cores), cache the wheel under ~/.cache/paratrain/wheels (or $PARATRAIN_CACHE_DIR) and
    install it. The next install for the same horovod/torch/python/CUDA takes seconds; when a matching Horovod is
    already installed this does nothing.
    """
    if backend != "horovod":
        raise ConfigError(f'cannot set up "{backend}" (known: {", ".join(BACKENDS)})',
                          hint="DeepSpeed and TensorFlow install with pip: pip install \"paratrain[deepspeed]\"")
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from paratrain.install import horovod

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=console.err, transient=True) as bar:
        task = bar.add_task("horovod", total=100)

        def show(text: str, percent: float | None) -> None:
            bar.update(task, description=text, **({"completed": percent} if percent is not None else {}))

        result = horovod.setup(show, force=force, rebuild=rebuild)
    if result.action == "present":
        what = "this torch and TensorFlow" if horovod.tensorflow_version() else "this torch"
        console.err.print(f"horovod {horovod.VERSION} is already installed for {what}; nothing to do "
                          "(--force reinstalls)")
    elif result.action == "cached":
        console.err.print(f"installed horovod {horovod.VERSION} from the cached wheel {result.wheel} "
                          f"in {result.seconds:.1f} s")
    else:
        console.err.print(f"built and installed horovod {horovod.VERSION} in {result.seconds:.0f} s; "
                          f"wheel cached at {result.wheel}")


def register(app: typer.Typer) -> None:
    app.command("setup")(setup)
