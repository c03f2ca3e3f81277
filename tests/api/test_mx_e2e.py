"""End-to-end acceptance of the MXNet path (docs/mxnet.md): a Gluon CNN with a residual block,
trained here on Fashion-MNIST, exported, calibrated in MXNet, quantized and compiled; the
quantized and compiled models run in plain MXNet (custom ops from the ratelnn library) and
reload in a fresh process.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ratelnn
from ratelnn.frontend.mxnet import converter
from ratelnn.oplib import flush_statistics
from ratelnn.testing.mx_fashion import cached_mx_fashion_cnn, predict, to_nchw

from helpers.stats import subprocess_env

# MXNet's OpenMP pools spin-wait: on a loaded 2-core machine more than one thread per op is
# many times slower. Takes effect if MXNet is not imported yet (pytest imports test modules
# before running any test).
os.environ.setdefault("OMP_NUM_THREADS", "1")

CAL_BATCHES, CAL_BATCH = 10, 32


@pytest.fixture(scope="module")
def data(fashion_mnist):
    (x_train, y_train), (x_test, y_test) = fashion_mnist
    return to_nchw(x_train), y_train, to_nchw(x_test), y_test


@pytest.fixture(scope="module")
def fp32_model(mx, data, request):
    """The trained model, cached under the pytest cache keyed by its builder's source."""
    x_train, y_train, _, _ = data
    start = time.time()
    model = cached_mx_fashion_cnn(mx, request.config.cache.mkdir("ratelnn-models"), x_train, y_train)
    print(f"trained or loaded the Gluon CNN in {time.time() - start:.1f} s")
    return model


# reloads each saved form (PREFIX OUT pairs after LIBRARY IMAGES) in one fresh process
RELOAD_SCRIPT = textwrap.dedent("""
    import sys, numpy as np
    np.bool = bool  # MXNet 1.9 under numpy >= 1.24
    import mxnet as mx
    library, images, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
    mx.library.load(library, verbose=False)
    x = np.load(images)
    for prefix, out in zip(pairs[::2], pairs[1::2]):
        sym = mx.sym.load(prefix + "-symbol.json")
        saved = mx.nd.load(prefix + "-0000.params")
        saved = saved if isinstance(saved, dict) else {}  # an empty dict is saved as an empty list
        arg = {k[4:]: v for k, v in saved.items() if k.startswith("arg:")}
        aux = {k[4:]: v for k, v in saved.items() if k.startswith("aux:")}
        ex = sym.bind(mx.cpu(), {"data": mx.nd.array(x), **arg}, aux_states=aux, grad_req="null")
        np.save(out, ex.forward(is_train=False)[0].asnumpy())
""")


def test_gluon_cnn_to_cal_quant_npu(mx, data, fp32_model, tmp_path):
    x_train, _, x_test, y_test = data
    output = fp32_model[0].list_outputs()[0]
    config = {"input_nodes": ["data"], "output_nodes": [output], "input_shapes": [[CAL_BATCH, 1, 28, 28]],
              "output_dir": str(tmp_path / "stats")}
    conv = converter(fp32_model, config)

    cal = conv.to_cal()
    predict(mx, cal, x_train[:CAL_BATCHES * CAL_BATCH], batch=CAL_BATCH)
    flush_statistics()
    quant = conv.to_quant()
    npu = conv.to_npu()
    ops = {n["op"] for n in __import__("json").loads(npu[0].tojson())["nodes"]}
    assert "ratel_engine_op" in ops and "Convolution" not in ops
    from ratelnn.profile import profile
    p = profile(npu, batch_size=CAL_BATCH)   # the cost model reads the MXNet form too
    engine_nodes = [n for n in __import__("json").loads(npu[0].tojson())["nodes"] if n["op"] == "ratel_engine_op"]
    assert p.latency_s > 0 and len(p.engines) == len(engine_nodes)

    logits = {form: predict(mx, model, x_test) for form, model in
              (("fp32", fp32_model), ("quant", quant), ("npu", npu))}
    top1 = {form: float(np.mean(v.argmax(1) == y_test)) for form, v in logits.items()}
    agree = float(np.mean(logits["npu"].argmax(1) == logits["quant"].argmax(1)))
    print(f"\nMXNet Gluon CNN, 10,000 Fashion-MNIST test images: FP32 {top1['fp32']:.4f}  "
          f"quant {top1['quant']:.4f}  npu {top1['npu']:.4f}  npu/quant agreement {agree:.4f}")
    assert top1["fp32"] > 0.80  # 1 epoch: about 84%
    assert abs(top1["quant"] - top1["fp32"]) <= 0.01
    assert abs(top1["npu"] - top1["fp32"]) <= 0.01
    assert agree >= 0.995

    # each form saved with sym.save + mx.nd.save reloads and runs in a fresh process (one for
    # the three: an MXNet import each cost seconds)
    images = tmp_path / "images.npy"
    np.save(images, x_test[:64])
    forms = {"cal": cal, "quant": quant, "npu": npu}
    pairs = []
    for form, (sym, arg, aux) in forms.items():
        prefix = str(tmp_path / form)
        sym.save(prefix + "-symbol.json")
        mx.nd.save(prefix + "-0000.params", {**{f"arg:{k}": v for k, v in arg.items()},
                                              **{f"aux:{k}": v for k, v in aux.items()}})
        pairs += [prefix, str(tmp_path / f"{form}-out.npy")]
    proc = subprocess.run([sys.executable, "-c", RELOAD_SCRIPT, ratelnn.ops_library_path("mxnet"), str(images),
                           *pairs], env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for form in forms:
        reference = logits["fp32" if form == "cal" else form][:64]
        np.testing.assert_allclose(np.load(tmp_path / f"{form}-out.npy"), reference, rtol=1e-5, atol=1e-5,
                                   err_msg=form)


def test_precision_tools_on_mxnet(mx, data, fp32_model, tmp_path):
    """Precision tools in MXNet: calibrate() in-process, analyze() against the NPU with the graph input
    as a row, then kld from the same statistics with the input and analyze()'s worst layer in
    int16 (layer_configs): the quantized and compiled MXNet models keep FP32 top-1."""
    import json
    x_train, _, x_test, y_test = data
    output = fp32_model[0].list_outputs()[0]
    config = {"input_nodes": ["data"], "output_nodes": [output], "input_shapes": [[CAL_BATCH, 1, 28, 28]],
              "output_dir": str(tmp_path / "stats")}
    conv = converter(fp32_model, config)
    conv.calibrate(x_train[:CAL_BATCHES * CAL_BATCH], progress=False)
    report = conv.analyze(x_train[:2 * CAL_BATCH], against="npu")
    assert report.rows[0].name == "data" and report.rows[0].op == "Input", report.table()
    assert all(np.isfinite(r.sqnr_db) and r.cosine > 0.9 for r in report.rows), report.table()
    worst = next(r for r in report.worst(len(report.rows)) if r.op != "Input")
    layer_configs = [{"layer_name": "data", "data_type": "int16"},
                     {"layer_name": worst.name, "data_type": "int16"}]
    mixed = converter(fp32_model, dict(config, quantize_algorithm="kld", layer_configs=layer_configs))
    qir = mixed.quantized_ir()
    assert qir.qparams["data"].dtype == "int16" and qir.qparams[worst.tensor].dtype == "int16"
    quant, npu = mixed.to_quant(), mixed.to_npu()
    quant_nodes = json.loads(quant[0].tojson())["nodes"]
    assert any(n["op"] == "ratel_quant" and n.get("attrs", {}).get("dtype") == "int16" for n in quant_nodes)
    x, y = x_test[:2000], y_test[:2000]
    top1 = {form: float(np.mean(predict(mx, model, x).argmax(1) == y))
            for form, model in (("fp32", fp32_model), ("quant", quant), ("npu", npu))}
    print(f"\nMXNet kld + int16 {worst.name} and input: {top1}")
    assert abs(top1["quant"] - top1["fp32"]) <= 0.01 and abs(top1["npu"] - top1["quant"]) <= 0.005, top1


def small_model(mx):
    """data [N,1,8,8] -> conv3x3(4) -> relu -> dense(3): (sym, arg_params, aux_params)."""
    data = mx.sym.var("data")
    h = mx.sym.Activation(mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), name="conv"), act_type="relu",
                          name="relu")
    sym = mx.sym.FullyConnected(h, num_hidden=3, name="fc")
    rng = np.random.default_rng(0)
    arg = {"conv_weight": rng.standard_normal((4, 1, 3, 3)), "conv_bias": np.zeros(4),
           "fc_weight": rng.standard_normal((3, 144)), "fc_bias": np.zeros(3)}
    return sym, {k: mx.nd.array(v) for k, v in arg.items()}, {}


def small_config(tmp_path, **overrides):
    config = {"input_nodes": ["data"], "output_nodes": ["fc_output"], "input_shapes": [[2, 1, 8, 8]],
              "output_dir": str(tmp_path / "stats")}
    config.update(overrides)
    return config


def test_bad_models_and_configs_raise_clear_errors(mx, tmp_path):
    from ratelnn.errors import CalibrationError, ModelError

    sym, arg, aux = small_model(mx)
    missing = {k: v for k, v in arg.items() if k != "fc_weight"}
    with pytest.raises(ModelError, match="fc_weight"):
        converter((sym, missing, aux), small_config(tmp_path))
    misshaped = {**arg, "conv_weight": mx.nd.zeros((4, 1, 5, 5))}
    with pytest.raises(ModelError, match="conv_weight"):
        converter((sym, misshaped, aux), small_config(tmp_path))
    with pytest.raises(ModelError, match="nonexistent"):
        converter((sym, arg, aux), small_config(tmp_path, output_nodes=["nonexistent"]))
    with pytest.raises(ModelError, match="data"):
        converter((sym, arg, aux), small_config(tmp_path, input_shapes=[[2, 8, 8]]))
    with pytest.raises(CalibrationError, match="statistics"):
        converter((sym, arg, aux), small_config(tmp_path)).to_quant()


def test_nan_calibration_data_and_corrupt_statistics(mx, tmp_path):
    from ratelnn.errors import CalibrationError

    conv = converter(small_model(mx), small_config(tmp_path))
    cal = conv.to_cal()
    bad = np.zeros((2, 1, 8, 8), np.float32)
    bad[1, 0, 3, 3] = np.nan
    with pytest.raises(mx.base.MXNetError, match="calibration batch contains NaN or Inf"):
        predict(mx, cal, bad, batch=2)
    predict(mx, cal, np.random.default_rng(1).standard_normal((8, 1, 8, 8)).astype(np.float32), batch=2)
    flush_statistics()
    snapshots = list((tmp_path / "stats" / "ratel_stats").glob("*.rstats"))
    assert snapshots
    snapshots[0].write_bytes(snapshots[0].read_bytes()[:-7] + b"garbage")
    with pytest.raises(CalibrationError, match=snapshots[0].name):
        conv.to_quant()
