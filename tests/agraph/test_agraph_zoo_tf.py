"""The trained TensorFlow zoo models go FP32 -> quant -> npu with the npu top-1 within 1 point
of FP32 on their dataset (docs/agraph.md); the compiled GraphDef holds engines."""
import pytest

import agraph
from agraph import flow

# (model, evaluated samples, FP32 top-1 floor): 1 point of 1,000 is 10 images
CASES = [("fashion_cnn_tf", 1000, 0.85), ("digits_cnn_tf", None, 0.93)]


@pytest.mark.parametrize("name,limit,floor", CASES)
def test_trained_tensorflow_model_npu_within_one_point_of_fp32(agraph_session, name, limit, floor):
    result = {s: agraph.evaluate(name, s, limit=limit, progress=False) for s in ("fp32", "quant", "npu")}
    fp32, npu = result["fp32"].metrics["top1"], result["npu"].metrics["top1"]
    print(f"\n{name}: " + ", ".join(f"{s} {r.metrics['top1']:.4f}" for s, r in result.items()))
    assert fp32 >= floor, f"{name} under-trained: FP32 top-1 {fp32:.4f}"
    assert abs(npu - fp32) <= 0.01, f"{name}: npu {npu:.4f} vs fp32 {fp32:.4f}"
    assert abs(result["quant"].metrics["top1"] - fp32) <= 0.01
    assert result["npu"].npu["latency_ms"] > 0 and result["npu"].npu["throughput_fps"] > 0
    graph_npu = agraph.get(name, "npu").graph
    assert any(n.op == "RatelEngineOp" for n in graph_npu.node)
    assert flow.stage_of("tensorflow", agraph.get(name, "quant").graph) == "quant"
