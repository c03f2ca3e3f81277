"""Where a compiled model's time goes outside the engine's instructions (small models).

For one model of bench/emulator_speed.py (default fer's pretrained mini-Xception, 64x64x1) at
each batch size, the compiled GraphDef (``to_npu()``) runs in a ``tf.compat.v1.Session``
(2 intra-op threads) through ``ratelnn.runners.session_callable`` (the step prepared once);
reported, min and median over ``--repeats`` calls (min-of-N: the machine may be shared):

- ``total``: one call from Python, feed to fetch;
- ``instructions``: over PROFILED_CALLS further calls with ``RATELNN_NPU_PROFILE=1`` (read by
  the executor on every run), per call the sum of its instructions' wall times (min / median);
- ``outside the instructions``: ``total`` less ``instructions`` (min from min, median from
  median): Session, Python, feeds, Quant/Dequant, the engine op's checks, output allocation
  and buffer set-up.  Not a profiled call's rest: writing a profile line per instruction
  costs about as much as all of these on a small model (fer: ~60 us of a 0.26 ms call);
- ``profile lines``: that cost, the median profiled call less the median ``total``;
- TensorFlow's own step stats (``RunOptions.FULL_TRACE``, min over TRACED_CALLS calls) of
  ``RatelQuant``, ``RatelEngineOp`` and ``RatelDequant``.

    python bench/engine_overhead.py [--model fer_emotion] [--batches 1,8] [--repeats 300]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import emulator_speed as es
from _report import cpu_name

TRACED_CALLS = 50
PROFILED_CALLS = 50


def session_call(graph_def, input_tensor: str, output_tensor: str, threads: int):
    """``(f(batch), traced(batch) -> {node: us})`` for ``graph_def`` in a Session."""
    import tensorflow as tf

    from ratelnn.runners import session_callable
    sess, x, y, run_options = es.session(graph_def, input_tensor, output_tensor, threads)
    call = session_callable(sess, [y], [x], run_options)
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    if run_options is not None:
        options.MergeFrom(run_options)

    def traced(batch):
        meta = tf.compat.v1.RunMetadata()
        sess.run(y, {x: batch}, options=options, run_metadata=meta)
        return {n.node_name: n.all_end_rel_micros for d in meta.step_stats.dev_stats for n in d.node_stats}
    return call, traced


def node_times(traced, batch, graph_def) -> dict:
    """Min microseconds per op type among the Ratel* nodes over TRACED_CALLS traced calls."""
    ops = {n.name: n.op for n in graph_def.node}
    best = {}
    for _ in range(TRACED_CALLS):
        for name, us in traced(batch).items():
            op = ops.get(name)
            if op and op.startswith("Ratel"):
                best[op] = min(best.get(op, float("inf")), us)
    return best


def profiled_calls(call, batch) -> list:
    """``[(call ms, its instructions' ms)]`` for PROFILED_CALLS calls with RATELNN_NPU_PROFILE=1
    (read by the executor on every run; its lines on file descriptor 2 go to a file, cut per
    call at the file offset after it)."""
    result = []
    with tempfile.TemporaryFile(mode="w+") as log:
        saved = os.dup(2)
        os.environ["RATELNN_NPU_PROFILE"] = "1"
        ends = []
        try:
            sys.stderr.flush()
            os.dup2(log.fileno(), 2)
            for _ in range(PROFILED_CALLS):
                start = time.perf_counter()
                call(batch)
                result.append((time.perf_counter() - start) * 1e3)
                ends.append(os.lseek(2, 0, os.SEEK_CUR))
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            del os.environ["RATELNN_NPU_PROFILE"]
        log.seek(0)
        text = log.read()
    sums, begin = [], 0
    for end in ends:
        lines = [ln for ln in text[begin:end].splitlines() if ln.startswith(es.PROFILE_PREFIX)]
        sums.append(sum(float(ln.split("\t")[-1]) for ln in lines) / 1e3)
        begin = end
    return list(zip(result, sums))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="fer_emotion")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from ratelnn.frontend.tensorflow import freeze_keras
    model = es.keras_model(args.model)
    graph_def, inputs, outputs = freeze_keras(model)
    shape = es.image_shape(model)
    print(f"{args.model}, {cpu_name()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"{args.threads} threads; ms (min / median of {args.repeats})")
    print("| batch | total | instructions | outside the instructions | profile lines | Quant | RatelEngineOp "
          "| Dequant |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b in [int(v) for v in args.batches.split(",")]:
        conv = es.compiled_converter(graph_def, inputs, outputs, b, tempfile.mkdtemp(prefix="ratelnn-overhead-"), shape)
        compiled = conv.to_npu()
        call, traced = session_call(compiled, inputs[0] + ":0", outputs[0] + ":0", args.threads)
        batch = es.random_images(b, 0, shape)
        for _ in range(20):
            call(batch)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            call(batch)
            times.append(time.perf_counter() - start)
        nodes = {op: us / 1e3 for op, us in node_times(traced, batch, compiled).items()}
        pairs = profiled_calls(call, batch)
        total, median = min(times) * 1e3, statistics.median(times) * 1e3
        least, typical = min(i for _, i in pairs), statistics.median(i for _, i in pairs)
        profile_lines = statistics.median(t for t, _ in pairs) - median
        op, quant, dequant = (nodes.get(k, float("nan")) for k in ("RatelEngineOp", "RatelQuant", "RatelDequant"))
        print(f"| {b} | {total:.3f} / {median:.3f} | {least:.3f} / {typical:.3f} | {total - least:.3f} / "
              f"{median - typical:.3f} | {profile_lines:.3f} | {quant:.3f} | {op:.3f} | {dequant:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
