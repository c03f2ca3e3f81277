"""ratelnn installs like a package: a wheel built from this checkout carries the C++ sources
(ratelnn/_ops_src) and the engine schema; installed into an empty virtual environment (its
dependencies and the extra `tensorflow` from the package index), it builds its op libraries from those sources into a
fresh cache and runs the quickstart from a directory outside the checkout.  The fresh cache
holds only the checkout's framework-independent objects (ops/core, keyed by the content of
their sources: the wheel's identical sources find them, saving the ~4 CPU minutes of compiling
the kernel paths again); the TensorFlow op library's own sources compile there against the
environment's TensorFlow."""
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from helpers.paths import REPO

ROOT = REPO


# The child processes see neither this checkout (PYTHONPATH) nor a forced kernel path.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RATELNN_ISA")}


def _run(command, env=None, **kwargs):
    proc = subprocess.run(command, capture_output=True, text=True, env=env or CLEAN_ENV, **kwargs)
    assert proc.returncode == 0, f"$ {' '.join(map(str, command))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.run_once   # the install and the op build are the same with oneDNN's rewrites off
@pytest.mark.timeout(1500)
def test_wheel_installs_into_an_empty_venv_and_runs_the_quickstart(tmp_path):
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
          "-w", str(wheels)], cwd=tmp_path)
    (wheel,) = wheels.glob("ratelnn-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n for n in names if n.startswith("ratelnn/_ops_src/")}
    expected = {f"ratelnn/_ops_src/{p.relative_to(ROOT / 'ops').as_posix()}"
                for p in (ROOT / "ops").rglob("*") if p.suffix in (".cc", ".h", ".inc")}
    assert expected and expected <= shipped
    assert "ratelnn/proto/engine.proto" in names
    zoo = {p.parent.name for p in (ROOT / "agraph" / "models").glob("*/model.py")}
    assert {"agraph/__init__.py", "agraph/__main__.py"} <= names  # the zoo ships beside ratelnn
    # with what examples/ and bench/ import from an install (agraph.face, agraph.pretrained)
    assert {"agraph/face.py", "agraph/pretrained.py", "agraph/shipped.py", "agraph/stages.py"} <= names
    assert {f"agraph/models/{m}/{f}" for m in zoo for f in ("model.py", "eval.py")} <= names
    assert not any(n.endswith((".so", ".o")) for n in names)

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)  # empty: no system site-packages
    python = env_dir / "bin" / "python"
    # --no-compile: no .pyc of the ~6,000 modules of the dependencies at install time (Python
    # compiles what the quickstart imports when it imports it); the install is otherwise the same.
    # TensorFlow is the extra `tensorflow` (the quickstart converts a Keras model).
    _run([python, "-m", "pip", "install", "-q", "--no-compile", f"{wheel}[tensorflow]"], cwd=tmp_path)

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = dict(CLEAN_ENV)
    env["RATELNN_CACHE_DIR"] = str(tmp_path / "cache")  # no library prebuilt: built from _ops_src
    core = _checkout_core_objects()
    (tmp_path / "cache" / "obj").mkdir(parents=True)
    for obj in core:
        shutil.copy2(obj, tmp_path / "cache" / "obj" / obj.name)
    where = _run([python, "-c", "import ratelnn, ratelnn._build as b; print(ratelnn.__file__); print(b.OPS_DIR)"],
                 cwd=work, env=env).stdout.split()
    assert where[0].startswith(str(env_dir)) and where[1].endswith("_ops_src")
    proc = _run([python, str(ROOT / "examples" / "quickstart.py")], cwd=work, env=env, timeout=1200)
    accuracy = {line.split()[0]: float(line.split()[1].rstrip("%")) for line in proc.stdout.splitlines()
                if line.strip().startswith(("FP32", "INT8", "NPU "))}
    assert set(accuracy) == {"FP32", "INT8", "NPU"}
    assert accuracy["NPU"] >= accuracy["FP32"] - 1.0
    assert list((tmp_path / "cache").glob("libratelnn_tf-*.so"))
    # the wheel's core sources found the checkout's objects (same names: same keys); only the
    # glue compiled here
    compiled = {p.name for p in (tmp_path / "cache" / "obj").glob("*.o")} - {p.name for p in core}
    glue = {p.stem for folder in ("tensorflow", "capi") for p in (ROOT / "ops" / folder).glob("*.cc")}
    assert compiled and {name.rsplit("-", 1)[0] for name in compiled} <= glue, compiled


def _checkout_core_objects():
    """The cached objects of ops/core this checkout's TensorFlow op library links (built
    first if needed, in the cache the other tests share)."""
    from ratelnn import _build, oplib
    oplib.ops_library_path("tensorflow")
    cmd = _build.compiler_command(_build.core_flags(oplib.tensorflow_build_flags()[0]))
    objects = [_build.object_path(Path(src).resolve(), cmd) for src in oplib.core_sources()]
    assert all(p.exists() for p in objects)
    return objects
