"""What the Session costs around a batch-1 compiled model: Session.run vs the prepared step.

One Keras model of bench/emulator_speed.py (default MobileNetV2, random weights, 224x224x3) is
compiled at batch 1 (``to_npu()``, calibrated as there) and timed in one process, interleaved
(``emulator_speed.time_interleaved``: rounds with the order rotating, ``--calls`` consecutive
calls per turn, steady-state median and min per call), four ways on the same image:

- ``Session.run``: the compiled GraphDef in a ``tf.compat.v1.Session`` set up as ratelnn's
  runner sets it up (each call on the calling thread), ``sess.run(y, {x: batch})``;
- ``session_callable``: the same Session's step prepared once
  (``ratelnn.runners.session_callable``, TF's ``Session._make_callable_from_options``);
- ``engine alone``: the model's engine through ``Engine.run(backend="native")`` (the C API of
  the native executor) on the already quantized input: no Session, no RatelQuant or
  RatelDequant;
- ``TFLite int8``: the full-integer TFLite model on XNNPACK (``emulator_speed.tflite_runner``).

    python bench/session_call.py [--model MobileNetV2] [--repeats 20] [--calls 10] [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

import emulator_speed as es
from _report import cpu_name
from isolated import Local


def engine_alone(compiled_ir, batch: np.ndarray, threads: int):
    """``(f, quantized input)``: f runs the single engine of ``compiled_ir`` on the native
    executor; the input is ``batch`` through the IR nodes before the engine (its Quant)."""
    from ratelnn.ir.evaluate import evaluate_node
    from ratelnn.npu.engine import Engine
    engines = [n for n in compiled_ir.nodes if n.op == "Engine"]
    if len(engines) != 1:
        raise SystemExit(f"the compiled model has {len(engines)} engines; this bench times one")
    values = {k: np.asarray(v) for k, v in compiled_ir.params.items()}
    values[compiled_ir.inputs[0]] = batch
    for node in compiled_ir.nodes:
        if node.op == "Engine":
            break
        values.update(zip(node.outputs, evaluate_node(node, [values[t] for t in node.inputs])))
    engine = Engine.from_bytes(engines[0].attrs["engine"])
    feed = [values[t] for t in engines[0].inputs]
    return (lambda _: engine.run(feed, backend="native", num_threads=threads)), feed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="MobileNetV2")
    ap.add_argument("--repeats", type=int, default=20, help="interleaved rounds")
    ap.add_argument("--calls", type=int, default=10, help="consecutive calls per contender and round")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import ratelnn
    from ratelnn.compiler import compile_graph
    from ratelnn.frontend.tensorflow import freeze_keras
    from ratelnn.runners import session_callable
    ratelnn.tf_init()
    model = es.keras_model(args.model)
    graph_def, inputs, outputs = freeze_keras(model)
    shape = es.image_shape(model)
    with tempfile.TemporaryDirectory(prefix="ratelnn-session-call-") as output_dir:
        conv = es.compiled_converter(graph_def, inputs, outputs, 1, output_dir, shape)
        qgraph = conv.quantized_ir()
        compiled_ir = compile_graph(qgraph, conv.build_config(qgraph), conv.device_info)
        compiled = conv.to_npu()
    batch = es.random_images(1, 2, shape)
    sess, x, y, run_options = es.session(compiled, inputs[0] + ":0", outputs[0] + ":0", args.threads)
    step = session_callable(sess, [y], [x], run_options)
    engine, _ = engine_alone(compiled_ir, batch, args.threads)
    runners = {"Session.run": lambda b: sess.run(y, {x: b}, options=run_options),
               "session_callable": lambda b: step(b)[0],
               "engine alone": engine,
               "TFLite int8": es.tflite_runner(model, 1, args.threads)}
    np.testing.assert_array_equal(runners["Session.run"](batch), runners["session_callable"](batch))
    load_start, start = os.getloadavg()[0], time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    timed = time_all(runners, batch, args)
    print(f"{args.model} batch 1, {cpu_name()}, {os.cpu_count()} CPUs, {args.threads} threads, {start}, "
          f"load average {load_start:.2f} at the start and {os.getloadavg()[0]:.2f} at the end; "
          f"{step.how}; {args.repeats} interleaved rounds of {args.calls} calls")
    print("| contender | median ms | min ms | / TFLite int8 (median) |")
    print("|---|---:|---:|---:|")
    for name, (median, least) in timed.items():
        print(f"| {name} | {median * 1e3:.3f} | {least * 1e3:.3f} | {median / timed['TFLite int8'][0]:.2f} |")
    return 0


def time_all(runners, batch, args):
    """Per contender ``(median, min)`` seconds per steady-state call, interleaved in this
    process (the Session, its prepared step and the engine are one runtime)."""
    contenders = {name: Recording(Local(run, batch)) for name, run in runners.items()}
    medians = es.time_interleaved(contenders, args.repeats, args.calls)
    return {name: (medians[name][0], min(contenders[name].steady)) for name in runners}


class Recording:
    """A contender whose steady-state call seconds (calls 2 onwards of each turn after the
    first, the warm-up) are kept."""

    def __init__(self, contender) -> None:
        self.contender, self.steady, self.turns = contender, [], 0

    def turn(self, calls: int):
        seconds = self.contender.turn(calls)
        self.turns += 1
        if self.turns > 1:
            self.steady.extend(seconds[1:])
        return seconds

    def cpu_seconds(self):
        """The contender's own (:func:`isolated.wait_until_idle` reads it)."""
        return self.contender.cpu_seconds()


if __name__ == "__main__":
    sys.exit(main())
