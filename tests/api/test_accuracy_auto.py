"""The default build checks itself (config ``accuracy_auto``): on a graph with a known int8 loss
it remedies the loss within the latency budget (equalization, before any int16), says so in one
line printed once, records the decision (converter, IR meta, the exported GraphDef, the config
the CLI writes), and the decision's keys
with ``accuracy_auto`` off rebuild the same engines without calibrating; ``accuracy_auto=False``
is plain int8; a model already good keeps its plain build after one check; on a trained model
whose loss neither another method nor int16 wins back, the least precise layer kept in fp32
does, and its recorded decision rebuilds the same engines; a bias correction that raises a
trained model's held-out cosine while shrinking its output is not taken (the judge is
scale-aware); a confident softmax's logits are judged."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

import ratelnn
from ratelnn.frontend.tensorflow import converter, recorded_meta
from ratelnn.metrics import output_cosines
from ratelnn.runners import run_model
from ratelnn.tune.auto import resolved
from ratelnn.tune.holdout import HELD_OUT_EVERY
from helpers.int8_loss import SHAPE, depthwise_loss_graph, softmax_digits, two_head_digits, wide_input_digits
from helpers.stats import small_graph_def

BATCH = 4


def _config(tmp_path, **extra):
    return dict({"input_nodes": ["images"], "output_nodes": ["scores"], "input_shapes": [[BATCH, *SHAPE]],
                 "output_dir": str(tmp_path)}, **extra)


def _engines(graph_npu) -> str:
    return hashlib.sha256(b"".join(n.attr["engine"].s for n in graph_npu.node if n.op == "RatelEngineOp")).hexdigest()


def _cosine(graph_def, model, x) -> float:
    run = lambda g: np.concatenate([run_model("tensorflow", g, {"images": x[i:i + BATCH]}, ["scores"])[0]
                                    for i in range(0, len(x), BATCH)])
    return output_cosines([run(model)], [run(graph_def)])[0]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The known-loss graph calibrated on 64 samples, built with and without accuracy_auto;
    judged on 32 other samples."""
    ratelnn.tf_init()
    graph_def = depthwise_loss_graph()
    data = np.random.default_rng(1).normal(0, 1, (64, *SHAPE)).astype(np.float32)
    unseen = np.random.default_rng(2).normal(0, 1, (32, *SHAPE)).astype(np.float32)
    out = {}
    for auto in (True, False):
        tmp = tmp_path_factory.mktemp(f"auto-{auto}")
        conv = converter(graph_def, _config(tmp, accuracy_auto=auto))
        conv.calibrate(data, progress=False)
        out[auto] = (conv, conv.to_npu(), tmp)
    return graph_def, unseen, out


def test_default_build_remedies_a_known_int8_loss(builds):
    graph_def, unseen, out = builds
    plain, auto = _cosine(graph_def, out[False][1], unseen), _cosine(graph_def, out[True][1], unseen)
    assert plain < 0.99 <= auto                                # judged on samples calibration never saw
    decision = out[True][0].accuracy_auto
    assert decision.cosine_before < 0.99 <= decision.cosine_after and decision.held_out_samples == 16
    assert decision.settings and decision.latency_ratio <= 1.3
    # the channel ranges 1 : 1e-3 are what cross-layer equalization removes: no int16 needed
    assert decision.settings["equalization"] is True
    assert not any(e["data_type"] == "int16" for e in decision.settings.get("layer_configs", []))
    assert not hasattr(out[False][0], "accuracy_auto")


def test_decision_is_recorded_and_rebuilds_without_calibrating(builds):
    graph_def, _, out = builds
    conv, graph_npu, tmp = out[True]
    record = conv.accuracy_auto.record(str(tmp))
    # equalization's statistics are named relative to the build's folder, found again under it
    assert record["settings"]["output_dir"] == os.path.join("auto", "equalization")
    assert resolved(record["settings"], str(tmp)) == conv.accuracy_auto.settings
    assert conv.quantized_ir().meta["accuracy_auto"] == record
    assert recorded_meta(graph_npu) == {"accuracy_auto": record}
    assert recorded_meta(conv.to_quant()) == {"accuracy_auto": record}
    assert recorded_meta(out[False][1]) == {}
    # emitting and compiling use the config the decision built with, not the converter's
    built = conv.build_config(conv.quantized_ir())
    assert {k: built[k] for k in conv.accuracy_auto.settings} == conv.accuracy_auto.settings
    assert out[False][0].build_config(out[False][0].quantized_ir()) is out[False][0].config
    # the compiled IR tools read is the one to_npu exports: the same engines, same bytes
    ir_engines = b"".join(n.attrs["engine"] for n in conv.compiled_ir().nodes if n.op == "Engine")
    assert hashlib.sha256(ir_engines).hexdigest() == _engines(graph_npu)
    rebuilt = conv.built_config
    assert rebuilt["accuracy_auto"] is False
    stats_before = sorted(os.listdir(tmp / "ratel_stats")) if (tmp / "ratel_stats").is_dir() else None
    again = converter(graph_def, rebuilt).to_npu()
    assert _engines(again) == _engines(graph_npu)
    assert (sorted(os.listdir(tmp / "ratel_stats")) if stats_before is not None else None) == stats_before


def test_same_build_in_another_folder_is_the_same_model(builds, tmp_path):
    """The equalized build's record names its statistics relative to the build's folder: the
    same data built elsewhere gives byte-identical quantized and compiled models."""
    graph_def, _, out = builds
    conv = out[True][0]
    data = np.random.default_rng(1).normal(0, 1, (64, *SHAPE)).astype(np.float32)
    other = converter(graph_def, _config(tmp_path / "elsewhere", accuracy_auto=True))
    other.calibrate(data, progress=False)
    ser = lambda g: g.SerializeToString(deterministic=True)  # noqa: E731
    assert ser(other.to_quant()) == ser(conv.to_quant())
    assert other.accuracy_auto.settings["output_dir"] != conv.accuracy_auto.settings["output_dir"]
    assert ser(other.to_npu()) == ser(conv.to_npu())


def test_decision_line_is_printed_once(tmp_path, capsys):
    ratelnn.tf_init()
    conv = converter(depthwise_loss_graph(), _config(tmp_path))
    conv.calibrate(np.random.default_rng(1).normal(0, 1, (32, *SHAPE)).astype(np.float32), progress=False)
    capsys.readouterr()
    conv.to_quant()
    conv.to_npu()
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("accuracy_auto:")]
    assert len(lines) == 1 and "predicted latency" in lines[0] and "reproduce" in lines[0]


def test_auto_off_is_plain_int8(builds):
    """accuracy_auto=False checks nothing and records no decision."""
    _, _, out = builds
    conv = out[False][0]
    assert "accuracy_auto" not in conv.quantized_ir().meta


def test_good_model_keeps_plain_build_after_one_check(tmp_path):
    """A small convolutional graph int8 already reproduces, its softmax's logits too (with the
    default weights' seed the logits read 0.96 and the build remedies them): checked once,
    nothing changed."""
    ratelnn.tf_init()
    graph_def = small_graph_def(seed=11)
    config = {"input_nodes": ["x"], "output_nodes": ["prob"], "input_shapes": [[4, 8, 8, 3]],
              "output_dir": str(tmp_path / "auto")}
    data = np.random.default_rng(0).uniform(0, 1, (32, 8, 8, 3)).astype(np.float32)
    conv = converter(graph_def, config)
    conv.calibrate(data, progress=False)
    npu = conv.to_npu()
    decision = conv.accuracy_auto
    assert decision.cosine_before >= 0.99 and decision.settings == {} and "kept" in decision.note
    plain = converter(graph_def, dict(config, accuracy_auto=False)).to_npu()
    assert _engines(npu) == _engines(plain)


def test_latency_budget_bounds_the_int16_remedy(tmp_path):
    """With the budget at the all-int8 latency no layer may move to int16; a budget below it is
    a ConfigError naming the key."""
    ratelnn.tf_init()
    conv = converter(depthwise_loss_graph(), _config(tmp_path, accuracy_auto_latency_ratio=1.0))
    conv.calibrate(np.random.default_rng(1).normal(0, 1, (32, *SHAPE)).astype(np.float32), progress=False)
    conv.to_npu()
    decision = conv.accuracy_auto
    assert decision.cosine_before < 0.99
    assert not any(e["data_type"] == "int16" for e in decision.settings.get("layer_configs", []))
    with pytest.raises(ratelnn.config.ConfigError, match="accuracy_auto_latency_ratio"):
        converter(depthwise_loss_graph(), _config(tmp_path, accuracy_auto_latency_ratio=0.9))


def test_held_out_outputs_below_one_step_are_not_judged(tmp_path):
    """Held-out samples whose float outputs are all below one quantization step of the outputs
    (here zero inputs: a detector's score map on images with nothing to detect) give a cosine
    of noise: the build says so and keeps plain int8 instead of remedying noise."""
    ratelnn.tf_init()
    data = np.random.default_rng(1).normal(0, 1, (32, *SHAPE)).astype(np.float32)
    data[HELD_OUT_EVERY - 1::HELD_OUT_EVERY] = 0.0            # the held-out rows (every 4th)
    conv = converter(depthwise_loss_graph(), _config(tmp_path))
    conv.calibrate(data, progress=False)
    conv.to_quant()
    decision = conv.accuracy_auto
    assert decision.cosine_before is None and decision.settings == {}
    assert "below one quantization step" in decision.note and decision.held_out_samples == 8


def test_fp32_on_the_least_precise_layers_wins_back_what_int16_cannot(tmp_path):
    """The digits MLP with a 1e5x wider input feature (helpers.int8_loss.wide_input_digits):
    int8 and int16 leave the other pixels no code, so plain int8 is near chance on the test
    digits; the default build keeps the layer reading the input in fp32 (the remedy after
    int16 on the least precise layers), says so in its line, stays within the latency budget,
    and is at FP32 top-1 on digits calibration never saw.  The decision's keys rebuild the same
    engines without calibrating."""
    ratelnn.tf_init()
    graph_def, inp, out, widen, (x_train, _), (x_test, y_test) = wide_input_digits()
    config = {"input_nodes": [inp], "output_nodes": [out], "input_shapes": [[64, 65]]}
    run = lambda model: run_model("tensorflow", model, {inp: widen(x_test)}, [out])[0]
    fp32 = run(graph_def)
    builds = {}
    for auto in (False, True):
        conv = converter(graph_def, dict(config, output_dir=str(tmp_path / f"auto-{auto}"), accuracy_auto=auto))
        conv.calibrate(widen(x_train[:256]), progress=False)
        builds[auto] = (conv, conv.to_npu())
    top1 = lambda y: float(np.mean(y.argmax(1) == y_test))
    plain, auto = run(builds[False][1]), run(builds[True][1])
    assert top1(plain) < 0.5 < 0.9 < top1(fp32)
    assert abs(top1(auto) - top1(fp32)) <= 0.01
    conv = builds[True][0]
    decision = conv.accuracy_auto
    fp32_layers = [e["layer_name"] for e in decision.settings["layer_configs"] if e["data_type"] == "fp32"]
    assert decision.cosine_before < 0.5 and decision.cosine_after >= 0.99 and decision.latency_ratio <= 1.3
    assert fp32_layers and conv.graph.node(fp32_layers[0]).inputs[0] == inp
    assert "fp32 on" in decision.line() and "predicted latency" in decision.line()
    again = converter(graph_def, conv.built_config)
    assert _engines(again.to_npu()) == _engines(builds[True][1]) and not hasattr(again, "accuracy_auto")


@pytest.mark.parametrize("user", ["list and whole model", "op type"])
def test_the_users_layer_entries_of_every_kind_stay_as_written(tmp_path, user):
    """The user's own layer_configs entries (a list of layer names, the whole-model default,
    an op type) travel into the decision as written, the remedies never name a layer the user
    set (the whole-model default is a default, which a layer's entry overrides), and the build
    goes through: on the wide-input digits MLP the remedy is fp32 on the layer reading the
    input, which only the op-type entry forbids."""
    ratelnn.tf_init()
    graph_def, inp, out, widen, (x_train, _), _ = wide_input_digits()
    first, second = [n.name for n in graph_def.node if n.op == "MatMul"]   # reading the input, then the next
    mine = ([{"layer_name": [second], "data_type": "int8"},
             {"start_tensor_names": ["DEFAULT"], "end_tensor_names": ["DEFAULT"], "data_type": "int8"}]
            if user == "list and whole model" else [{"op_type": "MatMul", "data_type": "int8"}])
    conv = converter(graph_def, {"input_nodes": [inp], "output_nodes": [out], "input_shapes": [[64, 65]],
                                 "output_dir": str(tmp_path), "layer_configs": mine})
    conv.calibrate(widen(x_train[:256]), progress=False)
    conv.to_npu()
    layers = conv.accuracy_auto.settings.get("layer_configs", mine)
    assert layers[:len(mine)] == mine
    added = {e["layer_name"] for e in layers[len(mine):]}
    assert second not in added
    assert (first in added) == (user == "list and whole model")


def test_a_small_output_that_loses_is_judged_on_its_own(tmp_path):
    """The two-head digits network (helpers.int8_loss.two_head_digits): class logits 100x larger
    than the parity logit, whose widest hidden unit leaves the others no int8 code.  On digits
    calibration never saw, plain int8 keeps the class logits and loses the parity logit: the
    cosine of all values together passes the bound, the lowest output cosine does not.  The
    default build judges by the latter, so its remedy fires and the parity head is back at FP32
    accuracy.  (``auto_int16`` off: it would promote the layer by its SQNR before the check.)"""
    ratelnn.tf_init()
    graph_def, inp, outs, (x_train, _), (x_test, y_test) = two_head_digits()
    run = lambda model: run_model("tensorflow", model, {inp: x_test.astype(np.float32)}, outs)
    fp32 = run(graph_def)
    together = lambda got: output_cosines([np.concatenate([g.ravel() for g in got])],
                                          [np.concatenate([f.ravel() for f in fp32])])[0]
    parity = lambda got: float(np.mean((got[1][:, 0] > 0) == (y_test % 2)))
    builds = {}
    for auto in (False, True):
        conv = converter(graph_def, {"input_nodes": [inp], "output_nodes": outs, "input_shapes": [[64, 64]],
                                     "output_dir": str(tmp_path / f"auto-{auto}"), "accuracy_auto": auto,
                                     "auto_int16": False})
        conv.calibrate(x_train[:256].astype(np.float32), progress=False)
        builds[auto] = (conv, run(conv.to_npu()))
    plain = builds[False][1]
    assert together(plain) >= 0.99 > min(output_cosines(plain, fp32))     # the old figure hides the loss
    assert output_cosines(plain, fp32)[0] >= 0.99 and parity(plain) < parity(fp32) - 0.05
    conv, auto = builds[True]
    decision = conv.accuracy_auto
    assert decision.cosine_before < 0.99 <= decision.cosine_after
    assert decision.settings and decision.latency_ratio <= 1.3
    assert min(output_cosines(auto, fp32)) >= 0.99 and abs(parity(auto) - parity(fp32)) <= 0.01


def test_a_correction_that_shrinks_an_output_is_not_taken(tmp_path):
    """The two-head digits network (helpers.int8_loss.two_head_digits) with every anchor in
    int16 on top of ``kld``: empirical bias correction raises the parity logit's held-out
    cosine by more than 0.02 while shrinking it further below FP32's norm.  A cosine judge
    takes it; the scale-aware judge does not: the accuracy passes keep the uncorrected model,
    and the step that judges the int8 choices again on top of the layer entries found
    (``_Remedies.reconsider``) does not take it."""
    from ratelnn.calibration.stats import load_statistics
    from ratelnn.ir.evaluate import evaluate
    from ratelnn.metrics import norm_ratios
    from ratelnn.quantization.accuracy import qdq_agreement
    from ratelnn.quantization.bias_correction import correct_biases
    from ratelnn.quantization.emit import emit_qdq
    from ratelnn.quantization.policy import make_plan
    from ratelnn.tune.auto import _Remedies
    from ratelnn.tune.holdout import split_sample
    ratelnn.tf_init()
    graph_def, inp, outs, (x_train, _), _ = two_head_digits()
    conv = converter(graph_def, {"input_nodes": [inp], "output_nodes": outs, "input_shapes": [[64, 64]],
                                 "output_dir": str(tmp_path), "auto_int16": False})
    conv.calibrate(x_train[:256].astype(np.float32), progress=False)
    stats, sample = load_statistics(str(tmp_path)), conv._sample("accuracy_auto", required=False)
    fit, held = split_sample(sample)
    reference = qdq_agreement(conv.graph, conv.quantize(stats), conv.config, held)[1]
    remedies = _Remedies(conv, stats, sample, reference, 0.99)
    producers = {t: n.name for n in conv.graph.nodes for t in n.outputs}
    int16 = [{"layer_name": producers.get(t, t), "data_type": "int16"}
             for t in make_plan(conv.graph, conv.config).anchors]
    start = {"quantize_algorithm": "kld", "layer_configs": int16}
    figure, q, _ = remedies.judge(start, limited=True)
    config = remedies.converter(start)[0].config
    corrected = correct_biases(conv.graph, q.copy(), config, fit)
    parity = lambda g: evaluate(emit_qdq(g, config), held, outs)[outs[1]]
    fp32 = evaluate(conv.graph, held, outs)[outs[1]]
    assert output_cosines([parity(corrected)], [fp32])[0] > output_cosines([parity(q)], [fp32])[0] + 0.02
    assert norm_ratios([parity(corrected)], [fp32])[0] < norm_ratios([parity(q)], [fp32])[0] - 0.02 < 0.9
    assert remedies.judge(dict(start, bias_correction="empirical"), limited=True)[1].meta[
        "accuracy_passes"]["applied"] == "none"
    after, settings, _ = remedies.reconsider((figure, start, q))
    assert "bias_correction" not in settings and after >= figure


def test_the_logits_of_a_confident_softmax_are_judged(tmp_path):
    """The softmax digits network (helpers.int8_loss.softmax_digits): a confident classifier
    whose wide hidden unit leaves the others few int8 codes.  On the held-out samples the
    plain build's probabilities read 1.0 (a softmax near 0 or 1 hides what the logits lose),
    its logits do not (bound 0.995 here: the logits read 0.990): judged on the logits too, the
    default build remedies the loss, and on digits calibration never saw its probabilities
    are closer to FP32 and its top-1 higher than plain int8's."""
    from ratelnn.calibration.split import split_sample
    from ratelnn.quantization.accuracy import qdq_agreements, softmax_logits
    ratelnn.tf_init()
    graph_def, inp, out, (x_train, _), (x_test, y_test) = softmax_digits()
    run = lambda model: run_model("tensorflow", model, {inp: x_test.astype(np.float32)}, [out])[0]
    fp32 = run(graph_def)
    builds = {}
    for auto in (False, True):
        conv = converter(graph_def, {"input_nodes": [inp], "output_nodes": [out], "input_shapes": [[64, 64]],
                                     "output_dir": str(tmp_path / f"auto-{auto}"), "accuracy_auto": auto,
                                     "accuracy_auto_cosine": 0.995, "auto_int16": False})
        conv.calibrate(x_train[:256].astype(np.float32), progress=False)
        builds[auto] = (conv, run(conv.to_npu()))
    conv, plain = builds[False]
    logits = softmax_logits(conv.graph)
    held = split_sample(conv._sample("accuracy_auto", required=False))[1]
    figures = qdq_agreements(conv.graph, conv.quantized_ir(), conv.config, held)[0]
    assert len(logits) == 1 and figures[out] >= 0.995 > figures[logits[0]]   # the probabilities hide the loss
    conv, auto = builds[True]
    decision = conv.accuracy_auto
    assert decision.cosine_before == pytest.approx(figures[logits[0]]) and decision.cosine_after >= 0.995
    assert decision.settings and decision.latency_ratio <= 1.3
    top1 = lambda y: float(np.mean(y.argmax(1) == y_test))
    assert output_cosines([auto], [fp32])[0] > output_cosines([plain], [fp32])[0] + 0.01
    assert top1(auto) >= top1(plain) + 0.005


def test_a_build_that_meets_the_bound_takes_a_method_confirmed_on_both_parts(tmp_path):
    """The two-head digits network (helpers.int8_loss.two_head_digits) with the bound below its
    plain build's held-out figure (0.39, its parity head): the plain build meets it, yet `kld`
    leaves less than half its error on the held-out part and on the fit part, so the default
    build takes it (same plan: no int16 by config), and on digits calibration never saw its
    lowest output cosine is higher than plain int8's.  A method the config names is left as
    set where it meets the bound; a model int8 already reproduces keeps its plain build (the
    good-model test: `mse` reads 0.9999 against 0.9997 there, a gain below CLEAR_MIN_GAIN)."""
    from ratelnn.tune.auto import CLEAR_ERROR_SHARE
    ratelnn.tf_init()
    graph_def, inp, outs, (x_train, _), (x_test, _) = two_head_digits()
    run = lambda model: run_model("tensorflow", model, {inp: x_test.astype(np.float32)}, outs)

    def build(name, **extra):
        conv = converter(graph_def, dict({"input_nodes": [inp], "output_nodes": outs, "input_shapes": [[64, 64]],
                                          "output_dir": str(tmp_path / name), "accuracy_auto_cosine": 0.3,
                                          "auto_int16": False}, **extra))
        conv.calibrate(x_train[:256].astype(np.float32), progress=False)
        return conv, run(conv.to_npu())

    fp32 = run(graph_def)
    _, plain = build("plain", accuracy_auto=False)
    conv, auto = build("auto")
    decision = conv.accuracy_auto
    assert 0.3 <= decision.cosine_before < 0.9 and decision.settings == {"quantize_algorithm": "kld"}
    assert 1.0 - decision.cosine_after <= CLEAR_ERROR_SHARE * (1.0 - decision.cosine_before)
    assert decision.latency_ratio == pytest.approx(1.0, abs=0.01) and "fit part" in decision.note
    assert min(output_cosines(auto, fp32)) > min(output_cosines(plain, fp32)) + 0.05
    # percentile reads 0.14 held out (kld 0.94): above a bound of 0.1 it is kept as the config names it
    named, _ = build("named", quantize_algorithm="percentile", accuracy_auto_cosine=0.1)
    decision = named.accuracy_auto
    assert decision.cosine_before >= 0.1 and decision.settings == {} and decision.note == "plain build kept"
