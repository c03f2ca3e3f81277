"""docs/agraph.md, "Walkthrough", run as written: a frozen tensorflow .pb that is not in the
zoo plus a packed dataset become a model folder that passes every rule, is listed through
AGRAPH_MODELS_PATH, and evaluates at fp32, quant and npu."""
import json
import re
import runpy

import agraph
from agraph import cli, registry

from helpers.paths import REPO


def walkthrough_files():
    """``{file name: code}`` of the blocks marked ``<!-- walkthrough: NAME -->`` in the doc."""
    text = (REPO / "docs" / "agraph.md").read_text()
    return dict(re.findall(r"<!-- walkthrough: (\S+) -->\n```python\n(.*?)```", text, re.S))


def test_the_docs_walkthrough_adds_a_model_that_runs_at_three_stages(agraph_session, tmp_path, capsys,
                                                                     monkeypatch):
    files = walkthrough_files()
    assert set(files) == {"prepare_wine.py", "wine_logreg_tf/model.py", "wine_logreg_tf/eval.py"}
    work, data = tmp_path / "work", tmp_path / "data"
    (work / "wine_logreg_tf").mkdir(parents=True)
    for name, code in files.items():
        (work / name).write_text(code)
    monkeypatch.setenv("AGRAPH_DATA_DIR", str(data))
    monkeypatch.chdir(work)
    runpy.run_path("prepare_wine.py", run_name="__main__")  # `python prepare_wine.py`, in this process
    folder = work / "wine_logreg_tf"
    assert sorted(p.name for p in folder.iterdir()) == ["dataset.json", "eval.py", "model.py", "wine_logreg_tf.pb"]
    assert json.loads((folder / "dataset.json").read_text())["archive"] == "wine_chemistry.tgz"

    monkeypatch.setenv("AGRAPH_MODELS_PATH", str(work))
    assert cli.main(["check", str(folder)]) == 0
    assert capsys.readouterr().out == f"{folder}: ok, every rule holds\n"
    assert "wine_logreg_tf" in registry.folders()
    results = {s: agraph.evaluate("wine_logreg_tf", s, progress=False) for s in ("fp32", "quant", "npu")}
    top1 = {s: r.metrics["top1"] for s, r in results.items()}
    print(f"\nwine_logreg_tf on {results['fp32'].samples} held-out wines: {top1}")
    assert results["fp32"].samples == 89 and top1["fp32"] >= 0.9
    assert abs(top1["npu"] - top1["fp32"]) <= 0.05  # 89 samples: 1 sample is 1.1 points
    assert results["npu"].npu["engines"] >= 1
