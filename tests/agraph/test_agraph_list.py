"""``python -m agraph list``: every registered model with its framework and weight source;
the zoo has 11 TensorFlow and 9 MXNet models (issue 13)."""
import json

from agraph import cli, registry

TRAINED = {"fashion_cnn_tf": "tensorflow", "digits_cnn_tf": "tensorflow",
           "fashion_cnn_mx": "mxnet", "digits_cnn_mx": "mxnet"}


def _agraph(capsys, *args):
    assert cli.main(list(args)) == 0
    return capsys.readouterr().out


def test_list_shows_every_model_with_its_weight_source(capsys, monkeypatch):
    monkeypatch.delenv("AGRAPH_MODELS_PATH", raising=False)
    rows = json.loads(_agraph(capsys, "list", "--json"))
    by_name = {r["name"]: r for r in rows}
    for name, framework in TRAINED.items():
        assert by_name[name]["framework"] == framework and by_name[name]["weights"] == "trained"
    assert all(r["weights"] in registry.WEIGHT_SOURCES for r in rows)
    assert all(r["zoo"] for r in rows)
    text = _agraph(capsys, "list")
    counts = registry.counts(registry.list_models())
    assert f"tensorflow: {counts['tensorflow']}, mxnet: {counts['mxnet']}, total: {len(rows)}" in text


def test_the_zoo_has_11_tensorflow_and_9_mxnet_models():
    zoo = [e for e in registry.list_models() if e.builtin]
    assert registry.counts(zoo) == {"tensorflow": 11, "mxnet": 9}
