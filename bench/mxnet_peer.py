"""ratelnn's quantized and compiled MXNet models against MXNet's own int8 quantization.

The Gluon Fashion-MNIST CNN of tests/api/test_mx_e2e.py (``ratelnn.testing.mx_fashion``; trained
once and cached) is exported and run in five forms, all in MXNet 1.9.1 on the CPU:

- FP32 MXNet: the exported symbol as is;
- ratelnn quant / npu: ``to_cal`` -> calibration on the first 320 training images (10
  batches of 32, naive thresholds) -> ``to_quant`` -> ``to_npu``, run after ``ratelnn.mx_init()``;
- MXNet int8: ``mx.contrib.quantization.quantize_model_mkldnn`` with ``calib_mode="naive"``,
  ``quantized_dtype="auto"``, per-channel weights, the same 320 calibration images; and the
  same with the ceil-mode average pooling left in FP32 (``excluded_sym_names``).

For each: top-1 on the 10,000 test images, and the median latency of one forward pass at
batch 1 and 32 (``OMP_NUM_THREADS`` threads, interleaved rounds with rotating order), with
ratios to FP32 MXNet; plus the cost model's predicted device time of the compiled model
(``ratelnn.profile.profile``). Writes its section of docs/benchmarks.md.

    python bench/mxnet_peer.py [--rounds 25] [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Sequence

import numpy as np

from _report import cpu_name, demote_headings, write_section

if TYPE_CHECKING:
    from ratelnn.npu.costmodel import Profile

REPO = Path(__file__).resolve().parent.parent
CALIBRATION_BATCHES, CALIBRATION_BATCH = 10, 32   # as in tests/api/test_mx_e2e.py
LATENCY_BATCHES = (1, 32)
FORWARDS_PER_ROUND = {1: 20, 32: 4}   # forward passes timed together in one round
WARMUP_FORWARDS = 5
CEIL_MODE_POOL = "fcnn_pool1_fwd"     # the AvgPool2D(2, ceil_mode=True) of the head

FP32 = "FP32 MXNet"
RATEL_QUANT = "ratelnn quant"
RATEL_NPU = "ratelnn npu"
MX_INT8 = "MXNet int8"
MX_INT8_FP32_POOL = "MXNet int8, avg pool FP32"

FORM_NOTES = {
    FP32: "exported symbol; oneDNN subgraph backend (conv+BN+ReLU fused)",
    RATEL_QUANT: "`to_quant()`: ratel_quant/ratel_dequant around float MXNet kernels",
    RATEL_NPU: "`to_npu()`: one ratel_engine_op, run by the native emulator on the CPU",
    MX_INT8: "`quantize_model_mkldnn`, naive, `auto` dtype, smart mode, channel-wise weights",
    MX_INT8_FP32_POOL: f"as above, `excluded_sym_names=[\"{CEIL_MODE_POOL}\"]`",
}


@dataclass
class Measured:
    """One form of the model: ``top1`` on the test set (fraction), ``agreement`` with FP32's
    top-1 predictions (fraction), ``round_s``: seconds per forward pass in each timing round,
    by batch size; ``latency_s`` / ``fastest_s``: their median / minimum by batch size."""

    top1: float
    agreement: float
    round_s: Dict[int, List[float]]

    @property
    def latency_s(self) -> Dict[int, float]:
        return {batch: statistics.median(v) for batch, v in self.round_s.items()}

    @property
    def fastest_s(self) -> Dict[int, float]:
        return {batch: min(v) for batch, v in self.round_s.items()}


def load_data():
    """Fashion-MNIST as NCHW float32: ``x_train, y_train, x_test, y_test``."""
    from ratelnn.datasets import load_fashion_mnist
    from ratelnn.testing.mx_fashion import to_nchw

    (x_train, y_train), (x_test, y_test) = load_fashion_mnist()
    return to_nchw(x_train), y_train, to_nchw(x_test), y_test


def ratelnn_models(mx, fp32, calibration: np.ndarray, output_dir: str):
    """``(quant, npu, config)``: ratelnn's quantized and compiled forms of ``fp32``, calibrated
    in MXNet on ``calibration`` [N,1,28,28] in batches of CALIBRATION_BATCH."""
    from ratelnn.frontend.mxnet import converter
    from ratelnn.oplib import flush_statistics
    from ratelnn.testing.mx_fashion import predict

    config = {"input_nodes": ["data"], "output_nodes": [fp32[0].list_outputs()[0]],
              "input_shapes": [[CALIBRATION_BATCH, 1, 28, 28]], "output_dir": output_dir}
    conv = converter(fp32, config)
    predict(mx, conv.to_cal(), calibration, batch=CALIBRATION_BATCH)
    flush_statistics()
    return conv.to_quant(), conv.to_npu(), config


def mxnet_int8_model(mx, fp32, calibration: np.ndarray, excluded: Sequence[str] = ()):
    """MXNet's own int8 model of ``fp32`` (oneDNN backend), naive min/max calibration on
    ``calibration`` in batches of CALIBRATION_BATCH."""
    from mxnet.contrib.quantization import quantize_model_mkldnn

    sym, arg, aux = fp32
    batches = mx.io.NDArrayIter(calibration, batch_size=CALIBRATION_BATCH)
    return quantize_model_mkldnn(sym, arg, aux, data_names=("data",), label_names=None, ctx=mx.cpu(),
                                 excluded_sym_names=list(excluded) or None, calib_mode="naive",
                                 calib_data=batches, num_calib_examples=len(calibration),
                                 quantized_dtype="auto", quantize_mode="smart",
                                 quantize_granularity="channel-wise")


def ceil_mode_pool_last_column(mx) -> Dict[str, List[float]]:
    """The last output column of a 2x2 stride-2 ceil-mode average pool of the 7x7 ramp
    1..49, by MXNet's FP32 ``Pooling`` and by its uint8 ``quantized_pooling`` (scale 1)."""
    ramp = np.arange(1, 50, dtype=np.float32).reshape(1, 1, 7, 7)
    pool = dict(kernel=(2, 2), stride=(2, 2), pool_type="avg", pooling_convention="full")
    fp32 = mx.nd.Pooling(mx.nd.array(ramp), **pool)
    quantized = mx.nd.contrib.quantized_pooling(mx.nd.array(ramp, dtype="uint8"), mx.nd.array([0.0]),
                                                mx.nd.array([255.0]), **pool)[0]
    return {"fp32": fp32.asnumpy()[0, 0, :, -1].tolist(),
            "int8": quantized.asnumpy()[0, 0, :, -1].astype(float).tolist()}


def bound_module(mx, model, batch: int):
    """An inference Module of ``model`` = (sym, arg, aux) bound for input [batch,1,28,28]."""
    sym, arg, aux = model
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind([("data", (batch, 1, 28, 28))], for_training=False)
    mod.set_params(arg, aux, allow_missing=False, allow_extra=False)
    return mod


def forward_seconds(mod, data_batch, forwards: int) -> float:
    """Mean wall seconds of ``forwards`` forward passes, each waited for to completion."""
    start = time.perf_counter()
    for _ in range(forwards):
        mod.forward(data_batch, is_train=False)
        mod.get_outputs()[0].wait_to_read()
    return (time.perf_counter() - start) / forwards


def latencies(mx, models: Dict[str, tuple], images: np.ndarray, batch: int,
              rounds: int) -> Dict[str, List[float]]:
    """Seconds per forward pass at ``batch`` of each model in each of ``rounds`` interleaved
    rounds (the order rotates every round); same input images for every model."""
    modules = {name: bound_module(mx, model, batch) for name, model in models.items()}
    data_batch = mx.io.DataBatch([mx.nd.array(images[:batch])])
    for mod in modules.values():
        forward_seconds(mod, data_batch, WARMUP_FORWARDS)
    times: Dict[str, List[float]] = {name: [] for name in modules}
    names = list(modules)
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(forward_seconds(modules[name], data_batch, FORWARDS_PER_ROUND[batch]))
    return times


def device_profiles(npu, config) -> Dict[int, "Profile"]:
    """The cost model's prediction (``ratelnn.profile.profile``) for the compiled model per batch
    size; the MXNet tuple is imported to the IR first (profile reads IR graphs)."""
    from ratelnn.frontend.mxnet import import_symbol
    from ratelnn.profile import profile

    graph = import_symbol(npu, config["input_nodes"], config["output_nodes"], config["input_shapes"])
    return {batch: profile(graph, batch_size=batch) for batch in LATENCY_BATCHES}


def _numbers(values: Sequence[float]) -> str:
    return ", ".join(f"{v:g}" for v in values)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds < 0.01 else f"{seconds * 1e3:.2f}"


def report(results: Dict[str, Measured], profiles: Dict[int, "Profile"], pool_column: Dict[str, List[float]],
           command: str, threads: int, rounds: int, elapsed_s: float) -> str:
    """The markdown page of the results (its section of docs/benchmarks.md)."""
    import mxnet
    from ratelnn.npu.costmodel import DEFAULT_PARAMS

    device_s = {batch: p.latency_s for batch, p in profiles.items()}
    layers = profiles[LATENCY_BATCHES[0]].layers
    overhead_bound = sum(row.bound == "overhead" for row in layers)
    bound_count = (f"all {len(layers)} of its" if overhead_bound == len(layers)
                   else f"{overhead_bound} of its {len(layers)}")

    fp32 = results[FP32]
    b_small, b_large = LATENCY_BATCHES
    lines = [
        "# MXNet peer benchmark: ratelnn vs MXNet's own int8 quantization",
        "",
        "Written by `bench/mxnet_peer.py`; rerun to update. Command:",
        "",
        f"    {command}",
        "",
        "Model: the Gluon Fashion-MNIST CNN of `tests/api/test_mx_e2e.py` "
        "(`ratelnn.testing.mx_fashion`: conv+BN+ReLU, max pool, residual block, stride-2 conv, "
        "2x2 average pool in ceil mode, dense; 1 epoch of Adam), exported to a symbol + params. "
        f"Calibration for both quantizers: the first {CALIBRATION_BATCHES * CALIBRATION_BATCH} "
        f"training images in batches of {CALIBRATION_BATCH}, naive (min/max) thresholds. "
        "Top-1 on the 10,000 test images (batches of 500). Latency: one `Module.forward` plus "
        f"waiting for the output, input already in an NDArray; median over {rounds} interleaved "
        f"rounds (order rotating; a round times {FORWARDS_PER_ROUND[b_small]} passes at batch "
        f"{b_small}, {FORWARDS_PER_ROUND[b_large]} at batch {b_large}). `OMP_NUM_THREADS={threads}`; "
        f"the emulator's thread pool uses the {os.cpu_count()} logical CPUs. MXNet "
        f"{mxnet.__version__} (pip wheel, oneDNN), {cpu_name()}, load average "
        f"{os.getloadavg()[0]:.2f} at the end; the run took {elapsed_s:.0f} s.",
        "",
        f"| form | top-1 | agrees with FP32 | ms, batch {b_small} | x FP32 | ms, batch {b_large} | x FP32 | what runs |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, m in results.items():
        cells = [name, f"{m.top1:.4f}", f"{m.agreement:.4f}"]
        for batch in LATENCY_BATCHES:
            cells += [_ms(m.latency_s[batch]), f"{m.latency_s[batch] / fp32.latency_s[batch]:.2f}"]
        lines.append("| " + " | ".join(cells + [FORM_NOTES[name]]) + " |")
    npu = results[RATEL_NPU]
    lines += [
        f"| ratelnn npu, predicted device time | | | {_ms(device_s[b_small])} | "
        f"{device_s[b_small] / fp32.latency_s[b_small]:.3f} | {_ms(device_s[b_large])} | "
        f"{device_s[b_large] / fp32.latency_s[b_large]:.3f} | `ratelnn.profile.profile` on the "
        "emulated Hanguang-800-like device (4 cores), not a CPU measurement |",
        "",
        "The fastest round of each form (less sensitive to other load on the machine than the "
        "median):",
        "",
        f"| form | ms, batch {b_small} | x FP32 | ms, batch {b_large} | x FP32 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, m in results.items():
        cells = [name]
        for batch in LATENCY_BATCHES:
            cells += [_ms(m.fastest_s[batch]), f"{m.fastest_s[batch] / fp32.fastest_s[batch]:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Why the numbers are what they are",
        "",
        f"- **Accuracy.** ratelnn's quant and npu forms keep FP32's top-1 "
        f"({results[RATEL_QUANT].top1:.4f} and {npu.top1:.4f} vs {fp32.top1:.4f}); the npu "
        "form runs the same quantized model in integer arithmetic. MXNet's int8 model loses "
        f"{100 * (fp32.top1 - results[MX_INT8].top1):.1f} points ({results[MX_INT8].top1:.4f}). "
        "The loss comes from one op: MXNet 1.9.1's quantized average pooling "
        "(`_contrib_quantized_pooling`, oneDNN) in ceil mode (`pooling_convention=\"full\"`) "
        "divides the border windows that hang over the edge by the full kernel size, while the "
        "FP32 `Pooling` divides by the cells inside the input. On the head's 7x7 -> 4x4 pool, "
        "7 of 16 outputs per channel come out at about half their value (on the 7x7 ramp "
        f"1..49 the last column is {_numbers(pool_column['int8'])} instead of "
        f"{_numbers(pool_column['fp32'])}; measured by this run). Leaving that "
        f"one pool in FP32 gives {results[MX_INT8_FP32_POOL].top1:.4f}. ratelnn imports ceil-mode "
        "pooling as an explicit pad plus `AvgPool(count_include_pad=False)` "
        "(docs/mxnet.md), so its integer pool divides by the same counts as FP32.",
        f"- **ratelnn quant is a simulation, not a fast path.** It is the FP32 graph plus "
        "`ratel_quant`/`ratel_dequant` custom ops around every quantized tensor, and the weights "
        "are stored as integers and dequantized (and transposed back to MXNet's layout) by ops "
        "inside the graph on every forward pass. All arithmetic stays float; the extra ops are "
        "extra passes over memory and extra MXNet op dispatches. Its purpose is a framework-native accuracy check "
        f"of the integer model, and it is {results[RATEL_QUANT].latency_s[b_small] / fp32.latency_s[b_small]:.1f}x "
        f"(batch {b_small}) / {results[RATEL_QUANT].latency_s[b_large] / fp32.latency_s[b_large]:.1f}x "
        f"(batch {b_large}) the FP32 time.",
        f"- **ratelnn npu on the CPU measures the emulator, not the NPU.** The whole network is "
        "one `ratel_engine_op` between a `ratel_quant` and a `ratel_dequant`; the engine runs "
        "in the native executor, which computes every int8 multiply-add and requantization "
        "bit-exactly in scalar/SIMD C++ on the host CPU. That is a functional model, not an "
        "optimised int8 CPU kernel like oneDNN's, so its wall time says how long the emulation "
        "takes. The device time the compiled model would take on the emulated NPU is the cost "
        f"model's prediction: {_ms(device_s[b_small])} ms at batch {b_small} and "
        f"{_ms(device_s[b_large])} ms at batch {b_large} "
        f"(the emulator's wall time is {npu.latency_s[b_small] / device_s[b_small]:.0f}x / "
        f"{npu.latency_s[b_large] / device_s[b_large]:.0f}x that). For a "
        f"network this small, {bound_count} instructions are bound by the "
        f"cost model's fixed {DEFAULT_PARAMS.layer_overhead_cycles:.0f} cycles per instruction, "
        f"not by compute or bandwidth, so batch {b_large} (split over the cores) costs "
        f"about as much as batch {b_small}. The prediction includes the host-link (PCIe) "
        "transfer of the engine's input and output; the host-side Quant/Dequant and MXNet's "
        "dispatch are not in it.",
        "- **MXNet int8** runs oneDNN's int8 convolutions with fused requantization (and "
        "`_contrib_quantize_v2`/`_contrib_dequantize` at the borders). The model is so small "
        "(8 and 16 channels, a few hundred thousand multiply-adds per image) that per-op "
        "dispatch and OpenMP synchronisation, not arithmetic, dominate both MXNet forms, so "
        "the int8 model's gain over FP32 is modest and noisy here (x"
        f"{results[MX_INT8].latency_s[b_small] / fp32.latency_s[b_small]:.2f} / "
        f"x{results[MX_INT8].latency_s[b_large] / fp32.latency_s[b_large]:.2f} by medians, x"
        f"{results[MX_INT8].fastest_s[b_small] / fp32.fastest_s[b_small]:.2f} / "
        f"x{results[MX_INT8].fastest_s[b_large] / fp32.fastest_s[b_large]:.2f} by fastest "
        "rounds). The emulator runs the whole network as one op on "
        f"its own thread pool, which is why at batch {b_small} it is "
        f"{npu.latency_s[b_small] / fp32.latency_s[b_small]:.2f}x FP32 MXNet while at batch "
        f"{b_large}, with real arithmetic to do, it is "
        f"{npu.latency_s[b_large] / fp32.latency_s[b_large]:.2f}x.",
        "- Both quantizers use naive thresholds max(|min|, |max|); MXNet takes the min/max over "
        "all calibration batches, ratelnn (default `enable_EMA`) a moving average of the "
        "per-batch values, so their thresholds differ slightly.",
        "- Latencies are wall times. Interleaving puts every form under the same conditions "
        "on average, so ratios within one run mean more than absolute milliseconds; but with "
        f"a load average of {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (other jobs) even "
        "the ratios move by tens of percent between runs, most at batch 1 where a forward "
        f"pass is a few hundred microseconds and, with `OMP_NUM_THREADS={threads}`, MXNet's "
        "OpenMP barriers wait for descheduled threads. Only the accuracy columns and the "
        "predicted device time are exactly reproducible; rerun on an idle machine for firm "
        "latencies.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="interleaved timing rounds")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS for MXNet")
    parser.add_argument("--model-cache", type=Path, default=None,
                        help="where the trained model is kept (default: <ratelnn cache>/models)")
    args = parser.parse_args()
    if args.rounds < 1 or args.threads < 1:
        parser.error("--rounds and --threads must be positive")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)   # read when MXNet is first imported
    os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
    started = time.time()

    import ratelnn
    from ratelnn._build import cache_dir
    from ratelnn.mxnet_compat import import_mxnet
    from ratelnn.testing.mx_fashion import cached_mx_fashion_cnn, predict

    ratelnn.mx_init()
    mx = import_mxnet()
    x_train, y_train, x_test, y_test = load_data()
    fp32 = cached_mx_fashion_cnn(mx, args.model_cache or cache_dir() / "models", x_train, y_train)
    calibration = x_train[:CALIBRATION_BATCHES * CALIBRATION_BATCH]
    with tempfile.TemporaryDirectory(prefix="ratelnn-mxnet-peer-") as output_dir:
        quant, npu, config = ratelnn_models(mx, fp32, calibration, output_dir)
    models = {FP32: fp32, RATEL_QUANT: quant, RATEL_NPU: npu,
              MX_INT8: mxnet_int8_model(mx, fp32, calibration),
              MX_INT8_FP32_POOL: mxnet_int8_model(mx, fp32, calibration, excluded=[CEIL_MODE_POOL])}
    predictions = {name: predict(mx, model, x_test).argmax(1) for name, model in models.items()}
    print("top-1:", {name: round(float(np.mean(p == y_test)), 4) for name, p in predictions.items()}, flush=True)
    timed = {batch: latencies(mx, models, x_test, batch, args.rounds) for batch in LATENCY_BATCHES}
    results = {name: Measured(top1=float(np.mean(predictions[name] == y_test)),
                              agreement=float(np.mean(predictions[name] == predictions[FP32])),
                              round_s={batch: timed[batch][name] for batch in LATENCY_BATCHES})
               for name in models}
    profiles = device_profiles(npu, config)
    command = " ".join(["python bench/mxnet_peer.py"] + sys.argv[1:])
    page = report(results, profiles, ceil_mode_pool_last_column(mx), command, args.threads, args.rounds, time.time() - started)
    write_section("mxnet-peer", demote_headings(page))
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
