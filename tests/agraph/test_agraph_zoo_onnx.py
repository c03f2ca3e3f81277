"""The trained ONNX zoo model goes FP32 -> quant -> npu with the npu top-1 within 1 point of
FP32 on the held-out digits; its quantized form is a plain QDQ model, its compiled form holds
engines run by ``ratelnn.onnx_session``; its folder passes every add-model rule and the
command line evaluates it (docs/agraph.md)."""
import pytest

import agraph
from agraph import cli, flow
from agraph.check import check
from agraph.registry import ZOO_DIR

NAME = "digits_cnn_onnx"


@pytest.fixture(scope="module")
def stages(agraph_session):
    return {s: agraph.evaluate(NAME, s, progress=False) for s in ("fp32", "quant", "npu")}


def test_trained_onnx_model_npu_within_one_point_of_fp32(stages):
    fp32, npu = stages["fp32"].metrics["top1"], stages["npu"].metrics["top1"]
    print(f"\n{NAME}: " + ", ".join(f"{s} {r.metrics['top1']:.4f}" for s, r in stages.items()))
    assert fp32 >= 0.95, f"{NAME} under-trained: FP32 top-1 {fp32:.4f}"
    assert abs(npu - fp32) <= 0.01 and abs(stages["quant"].metrics["top1"] - fp32) <= 0.01
    assert stages["npu"].samples == stages["fp32"].samples == 449
    assert stages["npu"].npu["latency_ms"] > 0 and stages["npu"].npu["engines"] >= 1


def test_onnx_stages_are_onnx_models_of_their_form(stages):
    quant, npu = agraph.get(NAME, "quant").graph, agraph.get(NAME, "npu").graph
    assert {n.domain for n in quant.graph.node} <= {""}               # plain ONNX Runtime runs it
    assert flow.stage_of("onnx", quant) == "quant" and flow.stage_of("onnx", npu) == "npu"
    assert "RatelEngineOp" in {n.op_type for n in npu.graph.node}
    assert [f.name for f in agraph.get(NAME, "npu").files] == [f"{NAME}.onnx"]


def test_onnx_folder_passes_the_check_and_the_cli_evaluates_it(stages, capsys):
    assert check(ZOO_DIR / NAME) == []
    assert cli.main(["check", str(ZOO_DIR / NAME)]) == 0
    assert cli.main(["eval", NAME, "--stage", "npu", "--limit", "64"]) == 0
    out = capsys.readouterr().out
    assert "every rule holds" in out and NAME in out and "top1" in out
