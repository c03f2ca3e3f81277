"""ONNX Runtime contenders for the speed benches: a Keras model written as ONNX by tf2onnx
(input NCHW), quantized by ONNX Runtime's own ``quantize_static`` or compiled by ratelnn's
ONNX frontend.

- :func:`ort_int8_model`: ``quant_pre_process`` (shape inference and ORT's float graph
  optimizations), then ``quantize_static`` in the QDQ format, U8S8 (activations uint8
  asymmetric, weights int8 symmetric, per channel), MinMax calibration on the given batches;
- :func:`ort_runner`: the model in an ``InferenceSession`` with ``intra_op_num_threads`` and one
  inter-op thread, graph optimizations on (``ORT_ENABLE_ALL``: the QDQ pairs fuse into
  ``QLinearConv`` / ``QGemm``, whose u8s8 kernels use VNNI where the CPU has it and
  ``vpmaddubsw``, whose pair sums saturate, where it does not: docs/onnx.md);
- :func:`ratelnn_onnx_model`: ``ratelnn.frontend.onnx.converter(...).to_npu()``, to run by
  ``ratelnn.onnx_session``.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence, Tuple

import numpy as np
from onnxruntime.quantization import CalibrationDataReader


class _Batches(CalibrationDataReader):
    """``quantize_static``'s data reader over a list of input batches."""

    def __init__(self, input_name: str, batches: Sequence[np.ndarray]):
        self.items = iter([{input_name: b} for b in batches])

    def get_next(self):
        return next(self.items, None)


def ort_int8_model(model: Any, input_name: str, calibration: Sequence[np.ndarray]) -> Tuple[bytes, float]:
    """``(serialized QDQ U8S8 model, seconds)`` of ``model`` (an ``onnx.ModelProto``) quantized
    by ONNX Runtime, calibrated on the ``calibration`` batches; the seconds cover the
    pre-processing, the calibration and the quantization."""
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    reader = _Batches(input_name, calibration)
    with tempfile.TemporaryDirectory(prefix="ratelnn-ort-int8-") as tmp:
        float_path, pre_path, int8_path = (str(Path(tmp) / n) for n in ("float.onnx", "pre.onnx", "int8.onnx"))
        onnx.save(model, float_path)
        start = time.perf_counter()
        quant_pre_process(float_path, pre_path)
        quantize_static(pre_path, int8_path, reader, quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        seconds = time.perf_counter() - start
        return Path(int8_path).read_bytes(), seconds


def ort_runner(model: Any, input_name: str, threads: int) -> Callable:
    """f(batch) -> the first output of ``model`` (``ModelProto`` or bytes) in ONNX Runtime with
    ``threads`` intra-op threads and all graph optimizations."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    source = model if isinstance(model, bytes) else model.SerializeToString()
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    output = session.get_outputs()[0].name
    return lambda batch: session.run([output], {input_name: batch})[0]


def ratelnn_onnx_model(model: Any, input_name: str, output_name: str, calibration: Sequence[np.ndarray],
                       output_dir: str) -> Tuple[bytes, float]:
    """``(serialized compiled model, to_npu seconds)``: ``model`` converted by ratelnn's ONNX
    frontend at the batch of the ``calibration`` batches, calibrated on them and compiled by
    ``to_npu()`` (run by ``ratelnn.onnx_session``)."""
    from ratelnn.frontend.onnx import converter
    conv = converter(model, {"input_nodes": [input_name], "output_nodes": [output_name],
                             "input_shapes": [list(calibration[0].shape)], "output_dir": output_dir})
    conv.calibrate(np.concatenate(calibration), batch_size=len(calibration[0]), progress=False)
    start = time.perf_counter()
    compiled = conv.to_npu()
    seconds = time.perf_counter() - start
    return compiled.SerializeToString(), seconds
