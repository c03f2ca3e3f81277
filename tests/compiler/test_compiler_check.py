"""``compiler_check`` at ``to_npu()`` time (docs/multi-batch.md).

A clean build reports engine outputs within one code of the quantized model, per-layer rows
at level 2 and the model-output cosine; an engine with one corrupted weight channel is a
CompileError naming the engine and the layer.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import ratelnn
from ratelnn.compiler import CompileError
from ratelnn.compiler import compile as compile_mod
from ratelnn.npu.engine import Engine, seal
from ratelnn.proto import engine_pb2 as pb


def _converter(tmp_path, **config):
    import tensorflow as tf
    from tensorflow.keras import layers

    from ratelnn.frontend.tensorflow import converter, freeze_keras
    ratelnn.tf_init()
    tf.keras.utils.set_random_seed(0)
    inp = tf.keras.Input((8, 8, 3))
    x = layers.Conv2D(8, 3, padding="same", activation="relu", name="conv_a")(inp)
    x = layers.AveragePooling2D(2, name="pool")(x)
    x = layers.Conv2D(4, 3, padding="same", name="conv_b")(x)
    out = layers.Softmax()(layers.Dense(5)(layers.Flatten()(x)))
    graph_def, ins, outs = freeze_keras(tf.keras.Model(inp, out))
    return converter(graph_def, {"input_nodes": ins, "output_nodes": outs, "input_shapes": [[2, 8, 8, 3]],
                                 "output_dir": str(tmp_path), **config})


def test_clean_build_reports(tmp_path):
    c = _converter(tmp_path, compiler_check=2, static_batch_sizes=[1, 4])
    c.calibrate(np.random.default_rng(0).random((8, 8, 8, 3), dtype=np.float32), progress=False)
    c.to_npu()
    report = c.compiler_check_report
    assert report.sample == "2 rows of the calibration sample"
    assert report.outputs and report.layers
    assert all(r.max_diff <= 1 for r in report.outputs + report.layers)
    assert min(r.equal for r in report.layers) > 0.9
    assert all(cos > 0.99 for cos in report.cosine.values()) and report.cosine
    saved = json.loads((tmp_path / "compiler_check.json").read_text())
    assert saved["level"] == 2 and len(saved["layers"]) == len(report.layers)
    assert "cosine" in report.table()
    # level 1 without a calibration sample (calibrate() never ran on this output_dir):
    # random sample, no layer rows
    c1 = c
    c1.config["compiler_check"] = 1
    shutil.rmtree(tmp_path / "ratel_sample")
    c1.to_npu()
    assert c1.compiler_check_report.sample.startswith("uniform") and not c1.compiler_check_report.layers
    assert c1.compiler_check_report.outputs


def test_broken_engine_is_a_build_error(tmp_path, monkeypatch):
    c = _converter(tmp_path, compiler_check=1)
    c.calibrate(np.random.default_rng(0).random((8, 8, 8, 3), dtype=np.float32), progress=False)
    real_lower = compile_mod.lower_region
    broken = {}

    def lower_and_break(*args, **kwargs):
        engine = real_lower(*args, **kwargs)
        proto = pb.Engine()
        proto.CopyFrom(engine.proto)
        convs = [ins for ins in proto.instructions if ins.opcode == pb.CONV2D]
        ins = convs[-1]
        weights = proto.constants[ins.consts[0]]
        w = np.frombuffer(weights.data, np.int8).reshape(tuple(weights.shape)).copy()
        w[..., 0] = -w[..., 0]                       # output channel 0 negated
        weights.data = w.tobytes()
        broken["engine"], broken["layer"] = proto.name, ins.name
        return Engine.from_bytes(seal(proto))

    monkeypatch.setattr(compile_mod, "lower_region", lower_and_break)
    with pytest.raises(CompileError) as err:
        c.to_npu()
    message = str(err.value)
    assert broken["engine"] in message and repr(broken["layer"]) in message, message
    # the same build without the check passes silently: the check is what caught it
    c.config["compiler_check"] = 0
    c.to_npu()
