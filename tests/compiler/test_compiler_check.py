"""``compiler_check`` at ``to_npu()`` time (docs/multi-batch.md, "Compiler check").

A clean build passes every level (1 all close, 2 all equal, 3 cosine) in both modes, the
compiled model bit-equal to the quantized model lowered layer by layer.  A compiled engine
whose requantization multipliers were changed after compiling is a real mismatch: level 2
fails naming the layer, level 1 passes or fails by its tolerance, CheckPerLayer catches a
layer the model outputs hide from CheckOutput.  A lowering error both forms share is caught
against the QDQ quantized model.  ``compiler_check_data`` gives the sample.
"""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

import ratelnn
import ratelnn.compiler
from ratelnn.compiler import CompileError, compile_graph, run_compiled
from ratelnn.compiler import compile as compile_mod
from ratelnn.npu.engine import Engine, seal
from ratelnn.proto import engine_pb2 as pb

CALIBRATION = np.random.default_rng(0).random((8, 8, 8, 3), dtype=np.float32)


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


@pytest.fixture
def calibrated(tmp_path):
    c = _converter(tmp_path, compiler_check=0)
    c.calibrate(CALIBRATION, progress=False)
    return c


def _perturbed(factor: float, channel=None):
    """A compile_graph that multiplies the requantization multipliers (all, or output
    channel ``channel``) of the last CONV2D of the compiled engine by ``factor``; records the
    layer and the graph."""
    seen = {}

    def compile_and_perturb(qgraph, config, device_info=None, **options):
        graph = compile_graph(qgraph, config, device_info, **options)
        node = next(n for n in graph.nodes if n.op == "Engine")
        proto = pb.Engine()
        proto.CopyFrom(Engine.from_bytes(node.attrs["engine"]).proto)
        ins = [i for i in proto.instructions if i.opcode == pb.CONV2D][-1]
        mult = proto.constants[ins.consts[2]]
        m = np.frombuffer(mult.data, np.int32).astype(np.float64)
        m[slice(None) if channel is None else channel] *= factor
        mult.data = np.round(m).astype(np.int32).tobytes()
        node.attrs["engine"] = seal(proto)
        seen.update(layer=ins.name, graph=graph)
        return graph

    return compile_and_perturb, seen


def _output_diff(c, perturbed_graph) -> float:
    """Largest |difference| of the model output, perturbed vs clean compiled model, on the
    check's sample (the first 2 calibration rows), engines native."""
    clean = compile_graph(c.quantized_ir(), c.config)
    feeds = {clean.inputs[0]: CALIBRATION[:2]}
    out = clean.outputs[0]
    return float(np.max(np.abs(run_compiled(clean, feeds, "native")[out]
                               - run_compiled(perturbed_graph, feeds, "native")[out])))


def test_clean_build_passes_every_level_and_mode(tmp_path):
    c = _converter(tmp_path, compiler_check=2, compiler_check_mode="CheckPerLayer", static_batch_sizes=[1, 4])
    c.calibrate(CALIBRATION, progress=False)
    c.to_npu()
    report = c.compiler_check_report
    assert report.sample == "2 rows of the calibration sample" and report.mode == "CheckPerLayer"
    assert len(report.layers) == 6 and report.outputs
    assert all(r.passed and r.equal == 1.0 and r.max_code_diff == 0 for r in report.layers)
    assert all(r.passed and r.max_abs_diff == 0 for r in report.outputs)
    assert report.quantized and all(r.max_diff <= 1 for r in report.quantized)
    assert all(cos > 0.99 for cos in report.cosine.values()) and report.cosine
    saved = json.loads((tmp_path / "compiler_check.json").read_text())
    assert (saved["level"], saved["mode"], len(saved["layers"])) == (2, "CheckPerLayer", 6)
    assert "all equal" in report.table()
    for level in (1, 3):
        c.config.update(compiler_check=level, compiler_check_mode="CheckOutput")
        c.to_npu()
        assert c.compiler_check_report.level == level and not c.compiler_check_report.layers
    # without a calibration sample (calibrate() never ran on this output_dir): random sample
    shutil.rmtree(tmp_path / "ratel_sample")
    c.to_npu()
    assert c.compiler_check_report.sample.startswith("uniform") and c.compiler_check_report.outputs


def test_perturbed_requant_fails_level_2_naming_the_layer(calibrated, monkeypatch):
    c = calibrated
    perturb, seen = _perturbed(1.002)
    monkeypatch.setattr(ratelnn.compiler, "compile_graph", perturb)
    c.to_npu()                                   # no check: the perturbed model builds silently
    assert _output_diff(c, seen["graph"]) > 0     # the perturbation is real
    c.config.update(compiler_check=2)
    with pytest.raises(CompileError) as err:
        c.to_npu()
    message = str(err.value)
    assert "compiler_check 2 (all equal, CheckOutput)" in message, message
    assert f"the first layer that differs: engine 'identity_engine_0', layer {seen['layer']!r}" in message, message
    assert "up to 1 code," in message, message


def test_level_1_passes_within_its_tolerance_only(calibrated, monkeypatch):
    c = calibrated
    perturb, seen = _perturbed(1.002)
    monkeypatch.setattr(ratelnn.compiler, "compile_graph", perturb)
    c.config.update(compiler_check=1)
    with pytest.raises(CompileError, match=r"all close: \|compiled - quantized\| <= 0 \+ 1e-05"):
        c.to_npu()                                # Pulsar2's defaults: atol 0, rtol 1e-5
    diff = _output_diff(c, seen["graph"])
    c.config.update(compiler_check_atol=2 * diff)
    c.to_npu()
    assert c.compiler_check_report.outputs[0].max_abs_diff == pytest.approx(diff)
    c.config.update(compiler_check_atol=diff / 2)
    with pytest.raises(CompileError, match="model output"):
        c.to_npu()


def test_check_per_layer_catches_a_layer_the_outputs_hide(calibrated, monkeypatch):
    """Level 3 (cosine): one output channel of the last convolution 1.5x too strong; at a
    threshold between the layer's cosine and the output's, CheckOutput passes and
    CheckPerLayer fails naming that layer."""
    c = calibrated
    perturb, seen = _perturbed(1.5, channel=0)
    monkeypatch.setattr(ratelnn.compiler, "compile_graph", perturb)
    c.config.update(compiler_check=3, compiler_check_mode="CheckPerLayer", compiler_check_cosine=-1.0)
    c.to_npu()
    report = c.compiler_check_report
    layer_cos = next(r.cosine for r in report.layers if r.layer == seen["layer"])
    threshold = 0.99
    assert layer_cos < threshold < report.outputs[0].cosine     # the precondition of this test
    c.config.update(compiler_check_cosine=threshold, compiler_check_mode="CheckOutput")
    c.to_npu()
    c.config.update(compiler_check_mode="CheckPerLayer")
    with pytest.raises(CompileError) as err:
        c.to_npu()
    assert f"the first layer that differs: engine 'identity_engine_0', layer {seen['layer']!r}" in str(err.value)


def test_a_lowering_error_is_caught_against_the_qdq_model(calibrated, monkeypatch):
    """Every convolution lowered with output channel 0 negated: the compiled model and its
    layer-by-layer form agree, the QDQ quantized model does not."""
    c = calibrated
    real_lower = compile_mod.lower_region

    def lower_and_break(*args, **kwargs):
        engine = real_lower(*args, **kwargs)
        proto = pb.Engine()
        proto.CopyFrom(engine.proto)
        for ins in proto.instructions:
            if ins.opcode == pb.CONV2D:
                weights = proto.constants[ins.consts[0]]
                w = np.frombuffer(weights.data, np.int8).reshape(tuple(weights.shape)).copy()
                w[..., 0] = -w[..., 0]
                weights.data = w.tobytes()
        return Engine.from_bytes(seal(proto))

    monkeypatch.setattr(compile_mod, "lower_region", lower_and_break)
    c.config.update(compiler_check=2)
    with pytest.raises(CompileError) as err:
        c.to_npu()
    message = str(err.value)
    assert re.search(r"layer '[^']*/conv_a_1/convolution' lowered alone", message), message
    assert "differs from the quantized model by up to" in message, message


def test_check_data_gives_the_sample(calibrated, tmp_path):
    """``compiler_check_data`` (Pulsar2's ``compiler.input_sample_dir``): a folder of .npy
    samples the check runs on instead of the calibration sample."""
    c = calibrated
    folder = tmp_path / "samples"
    folder.mkdir()
    rng = np.random.default_rng(5)
    for k in range(3):
        np.save(folder / f"s{k}.npy", rng.random((8, 8, 3), dtype=np.float32))
    c.config.update(compiler_check=2, compiler_check_data=str(folder))
    c.to_npu()
    assert c.compiler_check_report.sample == f"2 rows of {folder}"
    np.save(folder / "s0.npy", rng.random((8, 8, 4), dtype=np.float32))   # the first sample, of a wrong shape
    with pytest.raises(ratelnn.errors.RatelError, match="s0.npy"):
        c.to_npu()


def test_integer_input_model_passes_level_2(calibrated, tmp_path, monkeypatch):
    """``remove_input_quant``: the compiled model takes the input's codes, made as the
    quantized model's Quant makes them: on inputs exactly halfway between two codes, with
    ``round_mode: half_to_even``, rounding half away from zero instead would differ."""
    monkeypatch.chdir(tmp_path)          # input_quant_nodes.txt is also written to the working directory
    c = calibrated
    qgraph = c.quantized_ir()
    scale = np.float32(qgraph.qparams[qgraph.inputs[0]].scale)
    halves = (np.random.default_rng(2).integers(0, 100, (2, 8, 8, 3)) + np.float32(0.5)) * scale
    assert np.all((halves.astype(np.float32) / scale) % 1 == 0.5)     # exactly halfway in float32
    folder = tmp_path / "halves"
    folder.mkdir()
    for k, x in enumerate(halves.astype(np.float32)):
        np.save(folder / f"{k}.npy", x)
    c.config.update(compiler_check=2, compiler_check_mode="CheckPerLayer", remove_input_quant=True,
                    round_mode="half_to_even", compiler_check_data=str(folder))
    c.to_npu()
    report = c.compiler_check_report
    assert report.layers and all(r.passed and r.equal == 1.0 for r in report.layers + report.outputs)
