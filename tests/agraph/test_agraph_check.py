"""``python -m agraph check FOLDER``: each add-model rule broken gives its own message
(docs/agraph.md, "Adding a model").  The folder under test is a small MXNet model with
seeded random weights on the digits dataset; each test breaks one rule."""
import textwrap

import pytest

from agraph import cli
from agraph.check import check

MODEL = textwrap.dedent('''
    from pathlib import Path

    import numpy as np

    NAME = "{name}"
    FRAMEWORK = "mxnet"
    DATASET = "digits"
    WEIGHTS = "random"
    INPUTS = ["data"]
    OUTPUTS = ["scores"]
    INPUT_SHAPES = [[1, 64]]
    TEST_INPUT_SHAPES = None


    def build(workdir, input_shapes=None):
        from ratelnn.mxnet_compat import import_mxnet
        mx = import_mxnet()
        rng = np.random.default_rng(0)
        scores = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=10, name="scores")
        arg = {{"scores_weight": mx.nd.array(rng.normal(size=(10, 64))), "scores_bias": mx.nd.zeros(10)}}
        prefix = Path(workdir) / "{file_name}"
        mx.model.save_checkpoint(str(prefix), 0, scores, arg, {{}})
        return [Path(f"{{prefix}}-symbol.json"), Path(f"{{prefix}}-0000.params")]


    def preprocess(samples):
        return np.asarray(samples, dtype=np.float32).reshape(len(samples), 64) / 16.0
''')
EVAL = textwrap.dedent('''
    from agraph.metrics import ModelMetrics, collect, top1_agreement

    from . import model


    def evaluate(run, dataset, stage, {signature}):
        outputs, _, ref = collect(run, dataset, model.preprocess, limit=limit, batch_size=batch_size,
                                  reference=reference)
        return {result}
''')
SIGNATURE = "*, limit=None, batch_size=32, reference=None"
RESULT = 'ModelMetrics(model.NAME, dataset.key, stage, {"agreement": top1_agreement(outputs, ref)}, len(outputs))'


def make_folder(root, name="digits_randfc_mx", file_name=None, signature=SIGNATURE, result=RESULT):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(MODEL.format(name=name, file_name=file_name or name))
    (folder / "eval.py").write_text(EVAL.format(signature=signature, result=result))
    return folder


def messages(folder, static=False):
    return [str(v) for v in check(folder, static=static)]


def test_a_valid_folder_passes_every_rule_and_the_cli_says_so(agraph_session, tmp_path, capsys):
    folder = make_folder(tmp_path)
    assert messages(folder) == []
    assert cli.main(["check", str(folder)]) == 0
    assert capsys.readouterr().out == f"{folder}: ok, every rule holds\n"


@pytest.mark.parametrize("name,expected", [
    ("digfc", "rule 1 (name): model name 'digfc' is too short (5 < 6 characters)"),
    ("test_image", "rule 1 (name): model name 'test_image' is generic"),
    ("Digits-FC", "rule 1 (name): model name 'Digits-FC' must be lower-case letters"),
    ("fashion_cnn_tf", "rule 1 (name): model name 'fashion_cnn_tf' is already taken by"),
])
def test_bad_names(agraph_session, tmp_path, name, expected):
    found = messages(make_folder(tmp_path, name), static=True)
    assert any(m.startswith(expected) for m in found), found


def test_missing_files(agraph_session, tmp_path):
    folder = make_folder(tmp_path)
    (folder / "eval.py").unlink()
    assert messages(folder) == [f"rule 2 (files): {folder} has no eval.py"]
    (folder / "model.py").unlink()
    assert f"rule 2 (files): {folder} has no model.py" in messages(folder)


def test_model_py_values(agraph_session, tmp_path):
    folder = make_folder(tmp_path)
    text = (folder / "model.py").read_text()
    (folder / "model.py").write_text(text.replace('NAME = "digits_randfc_mx"', 'NAME = "digits_fc"')
                                     .replace('FRAMEWORK = "mxnet"', 'FRAMEWORK = "caffe"'))
    found = messages(folder)
    assert "rule 3 (model.py): NAME = 'digits_fc' differs from the folder name 'digits_randfc_mx'" in found
    assert any(m.startswith("rule 3 (model.py): FRAMEWORK = 'caffe', expected one of") for m in found)
    (folder / "model.py").write_text(text.replace("TEST_INPUT_SHAPES = None", ""))
    assert messages(folder) == ["rule 3 (model.py): model.py does not define TEST_INPUT_SHAPES"]
    (folder / "model.py").write_text(text + "\nimport not_a_module_anywhere\n")
    assert messages(folder)[0].startswith("rule 3 (model.py): model.py or eval.py does not import: "
                                          "ModuleNotFoundError")


def test_evaluate_signature_differs(agraph_session, tmp_path):
    folder = make_folder(tmp_path, signature="limit=None, batch_size=64, reference=None")
    assert messages(folder) == [
        "rule 4 (eval.py): evaluate(run, dataset, stage, limit=None, batch_size=64, reference=None) differs "
        "from the shared signature evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None)"]


def test_model_metrics_not_returned(agraph_session, tmp_path):
    folder = make_folder(tmp_path, result='{"agreement": top1_agreement(outputs, ref)}')
    found = messages(folder)
    assert found == ["rule 4 (eval.py): model 'digits_randfc_mx': evaluate() returned dict, not "
                     "agraph.metrics.ModelMetrics (docs/agraph.md, rule 4)"], found


def test_model_files_not_named_after_the_model(agraph_session, tmp_path):
    folder = make_folder(tmp_path)
    (folder / "weights-0000.params").write_bytes(b"")
    assert messages(folder, static=True) == [
        "rule 5 (model files): weights-0000.params is a model file not named after the model (expected "
        "digits_randfc_mx.pb, digits_randfc_mx-symbol.json + digits_randfc_mx-0000.params or "
        "digits_randfc_mx.onnx)"]
    folder = make_folder(tmp_path / "b", file_name="net")
    found = messages(folder)
    assert found == ["rule 5 (model files): model 'digits_randfc_mx': build() wrote ['net-0000.params', "
                     "'net-symbol.json'], expected files named after the model: ['digits_randfc_mx-symbol.json', "
                     "'digits_randfc_mx-0000.params'] (docs/agraph.md, rule 5)"], found


def test_dataset_rules(agraph_session, tmp_path, monkeypatch):
    folder = make_folder(tmp_path)
    text = (folder / "model.py").read_text()
    (folder / "model.py").write_text(text.replace('DATASET = "digits"', 'DATASET = "coins_photos"'))
    found = messages(folder)
    assert len(found) == 1 and found[0].startswith("rule 6 (dataset): DATASET = 'coins_photos' is not registered")
    (folder / "dataset.json").write_text('{"key": "coins_photos", "archive": "coins_photos.zip"}')
    assert messages(folder) == ["rule 6 (dataset): dataset 'coins_photos': archive 'coins_photos.zip' "
                                "must be a .tar or .tgz"]
    (folder / "dataset.json").write_text('{"key": "coins_photos", "archive": "coins_photos.tgz"}')
    found = messages(folder)
    assert len(found) == 1 and found[0].startswith("rule 6 (dataset): dataset 'coins_photos': ")
    assert "coins_photos.tgz is missing" in found[0] and "agraph-datasets.md" in found[0]


def test_build_failure_is_reported_with_its_place(agraph_session, tmp_path):
    folder = make_folder(tmp_path)
    text = (folder / "model.py").read_text()
    (folder / "model.py").write_text(text.replace("rng = np.random.default_rng(0)", "rng = 1 / 0"))
    (found,) = messages(folder)
    assert found.startswith("rule 7 (run): build/evaluate failed: ZeroDivisionError: division by zero (")
    assert "model.py:" in found


def test_cli_prints_each_violation_and_exits_1(agraph_session, tmp_path, capsys):
    folder = make_folder(tmp_path, "test_image", signature="limit=None")
    (folder / "net.pb").write_bytes(b"")
    assert cli.main(["check", str(folder), "--static"]) == 1
    lines = capsys.readouterr().out.splitlines()
    rules = [line.split(": ")[1] for line in lines]
    assert rules == ["rule 1 (name)", "rule 5 (model files)", "rule 4 (eval.py)"], lines
