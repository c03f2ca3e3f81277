"""``python -m agraph list``: every registered model with its framework and weight source;
the zoo has 11 TensorFlow and 9 MXNet models (issue 13)."""
import json
import os
import subprocess
import sys

from agraph import registry

from helpers.paths import REPO

TRAINED = {"fashion_cnn_tf": "tensorflow", "digits_cnn_tf": "tensorflow",
           "fashion_cnn_mx": "mxnet", "digits_cnn_mx": "mxnet"}


def _agraph(*args):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("AGRAPH_MODELS_PATH", None)
    proc = subprocess.run([sys.executable, "-m", "agraph", *args], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_list_shows_every_model_with_its_weight_source():
    rows = json.loads(_agraph("list", "--json"))
    by_name = {r["name"]: r for r in rows}
    for name, framework in TRAINED.items():
        assert by_name[name]["framework"] == framework and by_name[name]["weights"] == "trained"
    assert all(r["weights"] in registry.WEIGHT_SOURCES for r in rows)
    assert all(r["zoo"] for r in rows)
    text = _agraph("list")
    counts = registry.counts(registry.list_models())
    assert f"tensorflow: {counts['tensorflow']}, mxnet: {counts['mxnet']}, total: {len(rows)}" in text


def test_the_zoo_has_11_tensorflow_and_9_mxnet_models():
    assert registry.counts(registry.list_models()) == {"tensorflow": 11, "mxnet": 9}
