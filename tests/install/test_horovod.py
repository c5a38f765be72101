"""`paratrain setup horovod`: a no-op when a matching Horovod is installed, seconds from the wheel cache, and a
failed step is one line naming it and its log. (The build itself runs in `make test` on a fresh machine.)"""

import json
import os
import time

import pytest

from tests.helpers.launch import paratrain, worker_env

if os.environ.get("CI") != "true":
    pytest.importorskip("horovod")


def test_a_second_call_is_a_no_op():
    proc = paratrain("setup", "horovod")
    assert proc.returncode == 0, proc.stderr
    assert "already installed for this torch and TensorFlow; nothing to do" in proc.stderr  # make test has both


@pytest.mark.serial  # reinstalls Horovod: a test importing it meanwhile would see it half-installed
def test_reinstalling_from_the_cached_wheel_takes_seconds():
    from paratrain.install import horovod

    key = horovod.build_key()
    cached = list((horovod.cache_root() / "wheels" / key).glob("horovod-*.whl"))
    assert cached, f"make test builds the wheel into the cache ({horovod.cache_root()})"
    start = time.monotonic()
    proc = paratrain("setup", "horovod", "--force", timeout=120)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert "from the cached wheel" in proc.stderr and took < 30, (proc.stderr, took)
    report = json.loads(paratrain("doctor", "--json", "--timeout", "120").stdout)  # what it reports, not how fast
    components = {c["name"]: c for c in report["components"]}
    assert components["Horovod"]["version"] == "0.28.1" and "tensor ops: Gloo" in components["Horovod"]["detail"]


def test_the_wheel_is_keyed_by_tensorflow_too_and_carries_its_keras_binding():
    """make test installs TensorFlow before it builds Horovod: the build has the Keras binding, for that TensorFlow."""
    from paratrain.install import horovod

    tf = horovod.tensorflow_version()
    assert tf is not None and f"_tf-{tf}_" in horovod.build_key()
    assert (horovod.built_for() or {}).get("tensorflow") == tf and horovod.matches_installed()


def test_a_failed_build_step_is_one_line_with_its_log_and_keeps_the_installation(tmp_path):
    bogus = tmp_path / "horovod-0.28.1.tar.gz"
    bogus.write_bytes(b"not a tarball")
    env = worker_env(PARATRAIN_CACHE_DIR=str(tmp_path / "cache"), PARATRAIN_HOROVOD_SDIST=str(bogus))
    proc = paratrain("setup", "horovod", "--rebuild", env=env, timeout=180)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "horovod setup failed at unpacking" in lines[0] and str(bogus) in lines[0]
    assert not list((tmp_path / "cache").glob("wheels/*/*.whl"))  # nothing half-built was cached
    assert paratrain("setup", "horovod").returncode == 0  # the working installation is untouched


def test_an_unknown_backend_is_a_clear_error():
    proc = paratrain("setup", "horovd")
    assert proc.returncode == 2 and 'cannot set up "horovd"' in proc.stderr
