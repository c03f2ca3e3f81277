"""Size of a multi-batch compiled model against the batch-1 model (docs/multi-batch.md).

Keras MobileNetV2 (224x224x3, random weights: the size does not depend on them) and Gluon
MobileNetV2 1.0 (random weights) are calibrated on 8 uniform inputs and compiled with
``static_batch_sizes`` [1, 4, 8] and without (batch 1).  Per model: the serialized compiled
model (TensorFlow GraphDef bytes; MXNet symbol JSON plus params file bytes) and the ratio.
The result replaces the ``multibatch_size`` section of docs/benchmarks.md.

    python bench/multibatch_size.py
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from _report import cpu_name, write_section  # noqa: E402

SIZES = [1, 4, 8]


def tensorflow_sizes(workdir):
    """``{label: GraphDef bytes}`` of Keras MobileNetV2 compiled at batch 1 and for SIZES."""
    import tensorflow as tf

    from ratelnn.frontend.tensorflow import converter, freeze_keras
    tf.keras.utils.set_random_seed(0)
    graph_def, ins, outs = freeze_keras(tf.keras.applications.MobileNetV2(weights=None))
    calib = np.random.default_rng(0).uniform(-1, 1, (8, 224, 224, 3)).astype(np.float32)
    found = {}
    for label, extra in (("batch 1", {}), (f"static_batch_sizes {SIZES}", {"static_batch_sizes": SIZES})):
        c = converter(graph_def, {"input_nodes": ins, "output_nodes": outs, "input_shapes": [[1, 224, 224, 3]],
                                  "output_dir": os.path.join(workdir, "tf", label.split()[0]), **extra})
        c.calibrate(calib, progress=False)
        found[label] = len(c.to_npu().SerializeToString())
    return found


def mxnet_sizes(workdir):
    """``{label: symbol JSON + params bytes}`` of Gluon MobileNetV2 1.0 at batch 1 and for SIZES."""
    from ratelnn.frontend.mxnet import converter
    from ratelnn.mxnet_compat import import_mxnet
    mx = import_mxnet()
    from mxnet.gluon.model_zoo import vision
    mx.random.seed(0)
    net = vision.mobilenet_v2_1_0(pretrained=False)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 3, 224, 224)))
    prefix = os.path.join(workdir, "mobilenet_v2")
    net.export(prefix)
    sym, arg_params, aux_params = mx.model.load_checkpoint(prefix, 0)
    calib = np.random.default_rng(0).uniform(-1, 1, (8, 3, 224, 224)).astype(np.float32)
    found = {}
    for label, extra in (("batch 1", {}), (f"static_batch_sizes {SIZES}", {"static_batch_sizes": SIZES})):
        c = converter((sym, arg_params, aux_params),
                      {"input_nodes": ["data"], "output_nodes": [sym.list_outputs()[0][:-len("_output")]],
                       "input_shapes": [[1, 3, 224, 224]],
                       "output_dir": os.path.join(workdir, "mx", label.split()[0]), **extra})
        c.calibrate(calib, progress=False)
        out_sym, out_args, out_aux = c.to_npu()
        params = os.path.join(workdir, f"mx_{label.split()[0]}.params")
        mx.nd.save(params, {**{f"arg:{k}": v for k, v in out_args.items()},
                            **{f"aux:{k}": v for k, v in out_aux.items()}})
        found[label] = len(out_sym.tojson()) + os.path.getsize(params)
    return found


def main() -> None:
    import ratelnn
    ratelnn.tf_init()
    ratelnn.mx_init()
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for model, measure in (("Keras MobileNetV2 (TensorFlow GraphDef)", tensorflow_sizes),
                               ("Gluon MobileNetV2 1.0 (MXNet symbol + params)", mxnet_sizes)):
            sizes = measure(workdir)
            base, multi = sizes["batch 1"], sizes[f"static_batch_sizes {SIZES}"]
            rows.append(f"| {model} | {base:,} | {multi:,} | {multi / base:.4f} |")
    lines = ["## Multi-batch: compiled model size", "",
             f"`python bench/multibatch_size.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu_name()}. "
             "Random weights, 224x224 inputs, calibrated on 8 uniform inputs; bytes of the serialized compiled "
             f"model at batch 1 and with `static_batch_sizes: {SIZES}` (one copy of the weights, a memory plan and "
             "cycle estimates per extra size).", "",
             f"| model | batch 1 (bytes) | sizes {SIZES} (bytes) | ratio |", "|---|---:|---:|---:|", *rows]
    text = "\n".join(lines)
    print(text)
    write_section("multibatch_size", text)


if __name__ == "__main__":
    main()
