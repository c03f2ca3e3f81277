"""TensorFlow and MXNet are extras of ratelnn (pyproject.toml), not requirements: their ranges
admit the versions CI tests (the README's test command, run by .ci/run), and a call that needs
a missing framework raises an ImportError naming the extra (``ratelnn.frameworks``)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement

from helpers.paths import REPO

# reads files and runs child interpreters that import neither framework (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
README = (REPO / "README.md").read_text()
CI_RUN = (REPO / ".ci" / "run").read_text()


def requirements(names):
    return {Requirement(r).name: Requirement(r) for r in names}


def ci_pins():
    """``{distribution: version}`` pinned with ``==`` in the README's test command."""
    command = next(line for line in README.splitlines() if "python -m pytest" in line)
    return dict(re.findall(r"(?<![\w-])([A-Za-z][\w.-]*)==([\w.]+)", command.split(" --no-deps ")[0]))


def test_frameworks_are_extras_not_requirements():
    required = requirements(PROJECT["dependencies"])
    assert not {"tensorflow", "tensorflow-cpu", "mxnet", "onnx", "onnxruntime"} & set(required)
    extras = PROJECT["optional-dependencies"]
    assert set(requirements(extras["tensorflow"])) == {"tensorflow-cpu"}
    assert set(requirements(extras["mxnet"])) == {"mxnet"}
    assert set(requirements(extras["onnx"])) == {"onnx", "onnxruntime"}


def test_extras_are_ranges_admitting_the_tested_versions():
    extras = PROJECT["optional-dependencies"]
    tensorflow = requirements(extras["tensorflow"])["tensorflow-cpu"].specifier
    mxnet = requirements(extras["mxnet"])["mxnet"].specifier
    pins = ci_pins()
    assert pins["tensorflow-cpu"] in tensorflow and pins["mxnet"] in mxnet, pins
    assert "2.20.0" in tensorflow and "2.19.0" not in tensorflow   # protobuf 7 from 2.20 on
    assert "1.9.1" in mxnet and "2.0.0" not in mxnet
    assert len(tensorflow) > 1 and len(mxnet) > 1                   # ranges, not pins
    assert f"CI tests tensorflow-cpu {pins['tensorflow-cpu']} and mxnet {pins['mxnet']}." in " ".join(README.split())


def test_readme_test_command_is_what_ci_runs_and_installs_both_frameworks():
    command = next(line for line in README.splitlines() if "python -m pytest" in line)
    assert command in CI_RUN
    assert "'.[tensorflow,mxnet," in command
    quickstart = next(line for line in README.splitlines() if "examples/quickstart.py" in line)
    assert "'.[tensorflow]'" in quickstart


def _without(frameworks, code):
    """Run ``code`` in a child interpreter where importing ``frameworks`` fails as if they were
    not installed."""
    block = "".join(f"sys.modules[{name!r}] = None\n" for name in frameworks)
    env = {k: v for k, v in os.environ.items() if k != "RATELNN_ISA"}
    return subprocess.run([sys.executable, "-c", "import sys\n" + block + code], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)


@pytest.mark.parametrize("call", ["ratelnn.tf_init()", "ratelnn.runners.TFRunner(None)",
                                  "ratelnn.frontend.tensorflow.model_io.read_graphdef('model.pb')"])
def test_missing_tensorflow_names_the_extra(call):
    proc = _without(["tensorflow"], "import ratelnn, ratelnn.runners, ratelnn.frontend.tensorflow.model_io\n"
                                    "from ratelnn.errors import FrameworkNotInstalledError\n"
                                    f"try:\n    {call}\n"
                                    "except FrameworkNotInstalledError as e:\n"
                                    "    assert isinstance(e, ImportError)\n    print(e)\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TensorFlow is not installed" in proc.stdout and "pip install 'ratelnn[tensorflow]'" in proc.stdout


@pytest.mark.parametrize("call", ["ratelnn.mx_init()", "ratelnn.mxnet_compat.import_mxnet()"])
def test_missing_mxnet_names_the_extra(call):
    proc = _without(["mxnet"], "import ratelnn, ratelnn.mxnet_compat\n"
                               "from ratelnn.errors import FrameworkNotInstalledError\n"
                               f"try:\n    {call}\n"
                               "except FrameworkNotInstalledError as e:\n    print(e)\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MXNet is not installed" in proc.stdout and "pip install 'ratelnn[mxnet]'" in proc.stdout


def test_importing_ratelnn_needs_neither_framework():
    proc = _without(["tensorflow", "mxnet", "keras"], "import ratelnn, ratelnn.frontend.tensorflow, "
                                                     "ratelnn.frontend.mxnet\nprint('ok')\n")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_an_error_inside_an_installed_framework_is_not_hidden():
    """Only the framework's own absence becomes the extra's message: a module missing inside
    it propagates as the ImportError it is."""
    proc = _without([], "import importlib\n"
                        "from ratelnn import frameworks\n"
                        "real = importlib.import_module\n"
                        "def broken(name, *a):\n"
                        "    if name == 'tensorflow':\n"
                        "        raise ModuleNotFoundError(\"No module named 'absl'\", name='absl')\n"
                        "    return real(name, *a)\n"
                        "frameworks.importlib.import_module = broken\n"
                        "try:\n    frameworks.import_tensorflow()\n"
                        "except ImportError as e:\n    print(type(e).__name__, e.name)\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ModuleNotFoundError absl"


@pytest.mark.parametrize("missing,call,name", [
    ("onnx", "ratelnn.frontend.onnx.model_io.import_onnx()", "The onnx package"),
    ("onnxruntime", "ratelnn.frontend.onnx.runtime._ort()", "ONNX Runtime")])
def test_missing_onnx_names_the_extra(missing, call, name):
    proc = _without([missing], "import ratelnn, ratelnn.frontend.onnx.model_io, ratelnn.frontend.onnx.runtime\n"
                               "from ratelnn.errors import FrameworkNotInstalledError\n"
                               f"try:\n    {call}\n"
                               "except FrameworkNotInstalledError as e:\n    print(e)\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{name} is not installed" in proc.stdout and "pip install 'ratelnn[onnx]'" in proc.stdout
