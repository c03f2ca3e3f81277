"""Fuzzing the readers of untrusted input (docs/reliability.md "Fuzzing").

Targets: ``engine`` (engine bytes: Engine.from_bytes, then both executors on accepted ones,
which must agree bit for bit), ``stats`` (a ``.rstats`` statistics file), ``graphdef`` (a
serialized TensorFlow GraphDef through ``read_graphdef`` and the TF importer) and ``symbol``
(MXNet symbol JSON through the MXNet importer).  Engines and statistics files carry a CRC:
each input is tried as it is and resealed (a correct CRC over the mutated contents), so the
decoder behind the check is fuzzed too.

Each target runs in a worker subprocess that reports one outcome byte per execution over a
pipe: ``c`` a clean ``ratelnn.errors.RatelError``, ``a`` accepted, ``r`` a raw exception
(any other exception; details appended to ``findings.jsonl``).  The parent counts them and
detects crashes (the worker dies) and hangs (no outcome for ``timeout`` seconds: the worker
is killed), then restarts the worker for the remaining executions.

Mutation: with ``mode="atheris"`` (coverage-guided libFuzzer over instrumented ratelnn
code; ``pip install atheris``) or ``mode="mutate"`` (seeded byte and token mutations of the
seed inputs, no extra dependency: the test suite's short run).
"""
from __future__ import annotations

import collections
import json
import os
import select
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np

TARGETS = ("engine", "stats", "graphdef", "symbol")
OUTCOMES = {b"c": "clean error", b"a": "accepted", b"r": "raw exception"}
# bounded runs of accepted hostile engines (a configured limit, docs/reliability.md "Engines")
WORKER_ENV = {"RATELNN_MAX_TOTAL_BYTES": str(64 << 20), "TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1"}
# tokens the mutators insert: protobuf-ish varints and JSON/MXNet words
TOKENS = [b"\x00", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x08", b"\x7f", b"\x01",
          b'"op"', b'"null"', b'"inputs"', b'"attrs"', b'"heads"', b'"Convolution"', b'"FullyConnected"',
          b'"Activation"', b'"kernel"', b'"(3, 3)"', b'"(0, 0)"', b'"num_filter"', b'"num_hidden"', b"[[0, 0, 0]]",
          b"-1", b"0", b"1e308", b"NaN", b"Infinity", b"2147483648", b"-9223372036854775809", b"[]", b"{}",
          b'"tensors"', b'"hist"', b'"range_exp"', b'"bins"', b'"count"', b"RATELSTATS 1 ", b"\n"]


# ---------------------------------------------------------------- seeds
def _engine_seeds() -> List[bytes]:
    from ratelnn.npu.engine import EngineBuilder, make_lut, make_softmax_table, quantize_multiplier
    rng = np.random.default_rng(0)
    b = EngineBuilder("fuzz", 1)
    x = b.tensor("x", (1, 5, 5, 3), "int8", 0.05)
    c = b.tensor("conv", (1, 5, 5, 4), "int8", 0.1)
    p = b.tensor("pool", (1, 3, 3, 4), "int8", 0.1)
    a = b.tensor("add", (1, 3, 3, 4), "int8", 0.2)
    f = b.tensor("flat", (1, 36), "int8", 0.2)
    fc = b.tensor("fc", (1, 5), "int16", 0.01)
    s = b.tensor("sm", (1, 36), "uint8", 1 / 255)
    t = b.tensor("lut", (1, 36), "int8", 1 / 127)
    m, sh = quantize_multiplier(0.05 * 0.01 / 0.1, 27 * 128 * 128 + 100)
    b.add("CONV2D", [x], [c], [b.const("w", rng.integers(-128, 128, (3, 3, 3, 4)).astype(np.int8)),
                               b.const("b", rng.integers(-99, 99, 4).astype(np.int32)),
                               b.const("m", np.full(4, m, np.int32)), b.const("s", np.full(4, sh, np.int32))],
          name="conv", strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=1, act_min=0)
    b.add("MAX_POOL", [c], [p], name="pool", ksize=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    b.add("ADD", [p], [a], [b.const("k", np.arange(4, dtype=np.int8))], name="add", multipliers=[1 << 20, 1 << 21],
          shifts=[22])
    b.add("RESHAPE", [a], [f], name="flat")
    m2, s2 = quantize_multiplier(0.2 * 0.01 / 0.01, 36 * 128 * 128)
    b.add("FULLY_CONNECTED", [f], [fc], [b.const("fw", rng.integers(-128, 128, (36, 5)).astype(np.int8)),
                                         b.const("fb", np.zeros(5, np.int32)), b.const("fm", np.full(5, m2, np.int32)),
                                         b.const("fs", np.full(5, s2, np.int32))], name="fc")
    table, sm_m, sm_s = make_softmax_table("int8", 0.2, 1 / 255, 36)
    b.add("SOFTMAX", [f], [s], [b.const("exp", table)], name="softmax", multipliers=[sm_m], shifts=[sm_s])
    b.add("LUT", [f], [t], [b.const("tanh", make_lut(np.tanh, "int8", 0.2, "int8", 1 / 127))], name="tanh")
    b.set_io([x], [fc, s, t])
    return [b.build().to_bytes()]


def _stats_seeds() -> List[bytes]:
    from ratelnn.calibration.histogram import BINS, AbsHistogram
    from ratelnn.calibration.snapshot import encode_statistics
    from ratelnn.calibration.stats import TensorStats
    bins = np.zeros(BINS, np.int64)
    bins[:5] = [3, 0, 2, 0, 1]
    return [encode_statistics({"x": TensorStats(-1.5, 2.0, -1.2, 1.9, 3, 6, AbsHistogram(1, bins)),
                               "conv/y": TensorStats(0.0, 6.25, 0.0, 6.0, 3, 6)})]


def _graphdef_seeds() -> List[bytes]:
    import tensorflow as tf
    g = tf.Graph()
    with g.as_default():
        rng = np.random.default_rng(0)
        x = tf.compat.v1.placeholder(tf.float32, (1, 8, 8, 3), name="x")
        h = tf.nn.conv2d(x, rng.normal(0, 0.3, (3, 3, 3, 4)).astype(np.float32), 1, "SAME")
        h = tf.nn.relu(tf.nn.bias_add(h, np.ones(4, np.float32)))
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.reshape(h, (1, 64))
        tf.nn.softmax(tf.matmul(h, rng.normal(0, 0.1, (64, 5)).astype(np.float32)), name="y")
    return [g.as_graph_def().SerializeToString()]


def _symbol_params() -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"conv_weight": rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "conv_bias": np.zeros(4, np.float32),
            "fc_weight": rng.normal(0, 0.1, (5, 64)).astype(np.float32), "fc_bias": np.zeros(5, np.float32)}


def _symbol_seeds() -> List[bytes]:
    from ratelnn.mxnet_compat import import_mxnet
    mx = import_mxnet()
    x = mx.sym.Variable("data")
    h = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=4, name="conv")
    h = mx.sym.Activation(h, act_type="relu", name="relu")
    h = mx.sym.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    h = mx.sym.FullyConnected(mx.sym.flatten(h), num_hidden=5, name="fc")
    return [mx.sym.softmax(h, name="y").tojson().encode()]


SEEDS: Dict[str, Callable[[], List[bytes]]] = {"engine": _engine_seeds, "stats": _stats_seeds,
                                               "graphdef": _graphdef_seeds, "symbol": _symbol_seeds}


# ---------------------------------------------------------------- harnesses
def _resealed_engine(data: bytes) -> bytes:
    from ratelnn.npu.format import CHECKSUM_TAG
    body = data[:-5] if len(data) >= 5 and data[-5] == CHECKSUM_TAG else data
    return body + struct.pack("<BI", CHECKSUM_TAG, zlib.crc32(body))


def _engine_harness(workdir: Path) -> Callable[[bytes], None]:
    from ratelnn.errors import RatelError
    from ratelnn.npu.engine import Engine

    def run(data: bytes) -> None:
        error = None
        for candidate in (data, _resealed_engine(data)):
            try:
                eng = Engine.from_bytes(candidate, label="fuzz")
            except RatelError as e:
                error = e
                continue
            inputs = [np.ones((1,) + t.shape[1:], t.dtype) for t in eng.inputs]
            ref = eng.run(inputs, backend="reference")
            nat = eng.run(inputs, backend="native", num_threads=1)
            for r, n in zip(ref, nat):
                if r.shape != n.shape or not np.array_equal(r, n):
                    raise AssertionError("native and reference executors disagree on an accepted engine")
            return
        raise error
    return run


def _stats_harness(workdir: Path) -> Callable[[bytes], None]:
    from ratelnn.calibration.stats import FORMAT_VERSION, HEADER_MAGIC, read_statistics_file
    from ratelnn.errors import RatelError
    path = workdir / "fuzz.rstats"

    def run(data: bytes) -> None:
        payload = data[data.find(b"\n") + 1:]
        resealed = f"{HEADER_MAGIC} {FORMAT_VERSION} {zlib.crc32(payload):08x} {len(payload)}\n".encode() + payload
        error = None
        for candidate in (data, resealed):
            path.write_bytes(candidate)
            try:
                read_statistics_file(path)
                return
            except RatelError as e:
                error = e
        raise error
    return run


def _graphdef_harness(workdir: Path) -> Callable[[bytes], None]:
    from ratelnn.frontend.tensorflow import converter
    from ratelnn.frontend.tensorflow.model_io import read_graphdef
    path = workdir / "fuzz.pb"
    cfg = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[1, 8, 8, 3]],
           "output_dir": str(workdir / "out")}

    def run(data: bytes) -> None:
        path.write_bytes(data)
        converter(read_graphdef(str(path)), cfg)
    return run


def _symbol_harness(workdir: Path) -> Callable[[bytes], None]:
    from ratelnn.frontend.mxnet import converter
    params = _symbol_params()
    cfg = {"input_nodes": ["data"], "output_nodes": ["y"], "input_shapes": [[1, 3, 8, 8]],
           "output_dir": str(workdir / "out")}

    def run(data: bytes) -> None:
        converter((data.decode("utf-8", errors="replace"), params, {}), cfg)
    return run


HARNESSES = {"engine": _engine_harness, "stats": _stats_harness, "graphdef": _graphdef_harness,
             "symbol": _symbol_harness}


# ---------------------------------------------------------------- mutation (mode "mutate")
def mutate(seeds: List[bytes], seed: int, index: int) -> bytes:
    """Execution ``index``'s input: a seed input with 1 to 4 byte or token mutations, a
    pure function of ``(seed, index)`` (a restarted worker continues where it stopped)."""
    rng = np.random.default_rng([seed, index])
    data = bytearray(seeds[int(rng.integers(len(seeds)))])
    for _ in range(int(rng.integers(1, 5))):
        kind = int(rng.integers(8))
        n = len(data)
        at = int(rng.integers(n + 1))
        if kind == 0 and n:      # flip bits
            data[min(at, n - 1)] ^= 1 << int(rng.integers(8))
        elif kind == 1 and n:    # an interesting byte
            data[min(at, n - 1)] = int(rng.choice([0, 1, 0x7F, 0x80, 0xFF]))
        elif kind == 2:          # cut short
            del data[at:]
        elif kind == 3:          # delete a span
            del data[at:at + int(rng.integers(1, 16))]
        elif kind == 4:          # duplicate a span
            span = bytes(data[at:at + int(rng.integers(1, 64))])
            data[at:at] = span
        elif kind == 5:          # insert a token
            data[at:at] = TOKENS[int(rng.integers(len(TOKENS)))]
        elif kind == 6:          # random bytes
            data[at:at + int(rng.integers(1, 8))] = rng.integers(0, 256, int(rng.integers(1, 8))).astype(np.uint8).tobytes()
        else:                    # replace a decimal number (JSON, headers) by an interesting one
            text = bytes(data)
            starts = [i for i in range(max(0, at - 200), min(n, at + 200)) if 48 <= text[i] <= 57]
            if starts:
                i = starts[int(rng.integers(len(starts)))]
                j = i
                while j < n and 48 <= text[j] <= 57:
                    j += 1
                data[i:j] = str(int(rng.choice([0, -1, 1, 255, 256, 65536, 2 ** 31, 2 ** 63, 10 ** 30]))).encode()
    return bytes(data)


# ---------------------------------------------------------------- worker
def _classify(harness: Callable[[bytes], None], data: bytes, findings: Path, target: str) -> bytes:
    from ratelnn.errors import RatelError
    try:
        harness(data)
        return b"a"
    except RatelError:
        return b"c"
    except Exception as e:  # a raw exception: a finding
        frames = [f for f in traceback.extract_tb(e.__traceback__) if "ratelnn" in f.filename]
        where = f"{frames[-1].filename.split('ratelnn/')[-1]}:{frames[-1].lineno}" if frames else "?"
        with open(findings, "a") as f:
            f.write(json.dumps({"target": target, "type": type(e).__name__, "message": str(e)[:300],
                                "where": where, "input": data[:16384].hex()}) + "\n")
        return b"r"


_prepared: Dict[str, tuple] = {}

# The atheris worker's entry: ratelnn is imported (and every module a target uses, by making
# its seeds and harness) inside instrument_imports, so libFuzzer sees ratelnn's coverage.
ATHERIS_BOOT = """
import sys, atheris
with atheris.instrument_imports(include=["ratelnn"]):
    import ratelnn.testing.fuzz as fuzz
    fuzz.prepare(sys.argv[sys.argv.index("--worker") + 1], sys.argv[sys.argv.index("--workdir") + 1])
fuzz._main(sys.argv[1:])
"""


def prepare(target: str, workdir: str) -> tuple:
    """``(seeds, harness)`` of ``target``, made once per process (frameworks imported first)."""
    if target not in _prepared:
        if target == "graphdef":
            import tensorflow  # noqa: F401
        if target == "symbol":
            from ratelnn.mxnet_compat import import_mxnet
            import_mxnet()
        _prepared[target] = (SEEDS[target](), HARNESSES[target](Path(workdir)))
    return _prepared[target]


def worker(target: str, runs: int, start: int, seed: int, mode: str, fd: int, workdir: str) -> None:
    """Run ``runs`` executions of ``target`` (from execution ``start``), one outcome byte each to ``fd``."""
    work = Path(workdir)
    seeds, harness = prepare(target, workdir)
    findings = work / "findings.jsonl"
    current = work / "current.bin"
    if mode == "atheris":
        import atheris
        corpus = work / "corpus"
        corpus.mkdir(exist_ok=True)
        for k, s in enumerate(seeds):
            (corpus / f"seed{k}").write_bytes(s)
        (work / "tokens.dict").write_text("".join('"' + "".join("\\x%02x" % b for b in t) + '"\n' for t in TOKENS))

        def one(data: bytes) -> None:
            current.write_bytes(data)
            os.write(fd, _classify(harness, data, findings, target))
        atheris.Setup([sys.argv[0], f"-runs={runs}", f"-seed={seed + start + 1}", "-timeout=30",
                       f"-max_len={2 * max(len(s) for s in seeds)}", "-rss_limit_mb=4096", "-print_final_stats=0",
                       "-len_control=0",  # mutate the whole seed from the start
                       f"-dict={work / 'tokens.dict'}", f"-artifact_prefix={work}/", str(corpus)], one)
        atheris.Fuzz()
        return
    for index in range(start, start + runs):
        data = mutate(seeds, seed, index)
        current.write_bytes(data)
        os.write(fd, _classify(harness, data, findings, target))


# ---------------------------------------------------------------- parent
def fuzz_target(target: str, runs: int, seed: int = 0, mode: str = "mutate", timeout: float = 60.0,
                workdir: Optional[str] = None) -> dict:
    """Fuzz ``target`` for ``runs`` executions in worker subprocesses; returns
    ``{"target", "mode", "executions", "clean error", "accepted", "raw exception", "crash",
    "hang", "seconds", "findings": [distinct raw exceptions and crash/hang inputs]}``."""
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix=f"ratelnn-fuzz-{target}-") if own else workdir)
    counts = collections.Counter()
    crashes: List[dict] = []
    done, started = 0, time.monotonic()
    env = {**os.environ, **WORKER_ENV}
    while done < runs:
        r, w = os.pipe()
        entry = ["-c", ATHERIS_BOOT] if mode == "atheris" else ["-m", "ratelnn.testing.fuzz"]
        cmd = [sys.executable, *entry, "--worker", target, "--runs", str(runs - done),
               "--start", str(done), "--seed", str(seed), "--mode", mode, "--fd", str(w), "--workdir", str(work)]
        proc = subprocess.Popen(cmd, pass_fds=(w,), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(w)
        last = time.monotonic()
        ended = None
        stderr_tail = b""
        while True:
            ready, _, _ = select.select([r], [], [], 1.0)
            if ready:
                chunk = os.read(r, 65536)
                if not chunk:
                    ended = "exit"
                    break
                for b in chunk:
                    counts[OUTCOMES[bytes([b])]] += 1
                done += len(chunk)
                last = time.monotonic()
            elif time.monotonic() - last > timeout and done > 0 or time.monotonic() - last > timeout + 120:
                ended = "hang"   # the first execution also waits for imports and the op library build
                proc.kill()
                break
        os.close(r)
        proc.wait()
        stderr_tail = (proc.stderr.read() or b"")[-2000:]
        proc.stderr.close()
        if ended == "hang" or proc.returncode != 0 or (done < runs and mode == "mutate"):
            kind = "hang" if ended == "hang" else "crash"
            data = (work / "current.bin").read_bytes() if (work / "current.bin").exists() else b""
            counts[kind] += 1
            crashes.append({"target": target, "type": kind, "returncode": proc.returncode, "index": done,
                            "stderr": stderr_tail.decode(errors="replace")[-600:], "input": data[:16384].hex()})
            done += 1
        elif done < runs:  # atheris finished early (it counts its own runs): go on with another seed
            seed += 1
    findings = []
    path = work / "findings.jsonl"
    if path.exists():
        seen = set()
        for line in path.read_text().splitlines():
            item = json.loads(line)
            key = (item["type"], item["where"])
            if key not in seen:
                seen.add(key)
                findings.append(item)
    return {"target": target, "mode": mode, "executions": done, **{k: counts[k] for k in
            ("clean error", "accepted", "raw exception", "crash", "hang")},
            "seconds": round(time.monotonic() - started, 1), "findings": findings + crashes, "workdir": str(work)}


def _main(argv: List[str]) -> None:
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", choices=TARGETS, required=True)
    p.add_argument("--runs", type=int, required=True)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mode", choices=("mutate", "atheris"), default="mutate")
    p.add_argument("--fd", type=int, required=True)
    p.add_argument("--workdir", required=True)
    a = p.parse_args(argv)
    worker(a.worker, a.runs, a.start, a.seed, a.mode, a.fd, a.workdir)


if __name__ == "__main__":
    _main(sys.argv[1:])
