"""The accuracy passes (equalization, empirical and analytic bias correction, AdaRound) in the MXNet
frontend: the IR is shared, so this checks the NCHW path end to end on a small Gluon
depthwise-separable net with BatchNorm (random weights; accuracy claims are in
tests/quantization/test_accuracy_passes.py)."""
import tempfile

import numpy as np

from ratelnn.mxnet_compat import import_mxnet

mx = import_mxnet()
nn = mx.gluon.nn

from ratelnn.frontend.mxnet import converter  # noqa: E402
from ratelnn.ir.evaluate import evaluate  # noqa: E402
from ratelnn.runners import run_model  # noqa: E402

def _net(rng):
    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
            nn.Conv2D(8, 3, padding=1, groups=8, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
            nn.Conv2D(16, 1), nn.Activation("relu"), nn.GlobalAvgPool2D(), nn.Dense(5))
    net.initialize()
    net.hybridize()
    x = mx.nd.array(rng.standard_normal((4, 3, 8, 8)).astype(np.float32))
    net(x)
    for name, p in net.collect_params().items():
        if name.endswith(("running_var", "gamma")):
            value = np.exp(rng.uniform(-3, 3, p.shape))     # channel ranges ~400x apart
        else:
            value = rng.normal(0, 0.3, p.shape)
        p.set_data(mx.nd.array(value))
    prefix = tempfile.mkdtemp() + "/dwsep"
    net.export(prefix)
    symbol, args, aux = mx.model.load_checkpoint(prefix, 0)
    return (symbol, args, aux), symbol.list_outputs()[0]


def test_passes_run_in_mxnet_and_equalization_is_exact(rng):
    model, out = _net(rng)
    x = rng.standard_normal((64, 3, 8, 8)).astype(np.float32)
    cfg = {"input_nodes": ["data"], "output_nodes": [out], "input_shapes": [[16, 3, 8, 8]],
           "output_dir": tempfile.mkdtemp(), "auto_int16": False, "equalization": True}
    conv = converter(model, cfg)
    fp32 = run_model("mxnet", model, {"data": x[:16]}, [out])[0]
    np.testing.assert_allclose(evaluate(conv.graph, {"data": x[:16]})[conv.graph.outputs[0]], fp32,
                               rtol=1e-4, atol=1e-4 * np.abs(fp32).max())
    conv.calibrate(x, progress=False)
    tuned = converter(model, dict(cfg, bias_correction="empirical", adaround_iterations=50))
    qi, qt = conv.quantized_ir(), tuned.quantized_ir()
    assert any(not np.array_equal(qi.params[k], qt.params[k]) for k in qi.params)
    q = run_model("mxnet", tuned.to_quant(), {"data": x[:16]}, [out])[0]
    cos = np.sum(q * fp32) / np.linalg.norm(q) / np.linalg.norm(fp32)
    assert cos > 0.95, cos
    # analytic: the BatchNorm statistics (kept through folding and equalization) give the
    # mean input of the depthwise and pointwise layers; only their int32 biases change
    # (random weights and data unlike the BatchNorm statistics: whether it helps is checked
    # on the held-out samples, so here it is called directly)
    from ratelnn.quantization.bias_correction import correct_biases_analytic
    analytic = correct_biases_analytic(conv.graph, qi.copy(), conv.config)
    changed = sorted(k for k in qi.params if not np.array_equal(qi.params[k], analytic.params[k]))
    assert len(changed) == 2 and all(analytic.params[k].dtype == np.int32 for k in changed), changed
    checked = converter(model, dict(cfg, bias_correction="analytic")).quantized_ir().meta["accuracy_passes"]
    assert set(checked["held_out_agreement"]) == {"bias_correction", "none"}, checked
