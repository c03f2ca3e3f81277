"""Each speed contender in a process of its own, timed turn by turn from the bench's process.

Runtimes in one process disturb each other: ONNX Runtime's intra-op workers keep spinning on a
core after a run (measured: an idle ``InferenceSession``'s worker took most of a core while
another contender ran, and the compiled model's second thread got almost none of it), TF's and
XNNPACK's pools do the same for shorter spells.  A user runs one of them, so each contender
here gets a child process (``python bench/isolated.py``) that builds it from serialized bytes
(:data:`BUILDERS`) and, when told, runs a turn of consecutive calls on its batch and reports
the seconds of each call, timed inside the child (no pipe round trip in the figures).  The
children wait on a pipe between turns, so only one contender runs at a time.

Protocol (one JSON line each way): the parent writes ``{"calls": n}``, the child answers
``{"seconds": [...]}`` (or ``{"error": "..."}``); end of input ends the child.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
IDLE_WINDOW = 0.01    # seconds: the span over which wait_until_idle looks for CPU use (>= a tick)
IDLE_WINDOWS = 3      # consecutive idle spans wait_until_idle asks for
IDLE_TIMEOUT = 1.0    # seconds: the longest wait_until_idle waits


def _tf_session(payload: Dict[str, Any]) -> Callable:
    """A GraphDef (``graph_def`` bytes) in a Session, run as bench/emulator_speed.py's
    ``session_runner`` runs it; ``ratelnn_ops``: load ratelnn's TensorFlow ops first."""
    import tensorflow as tf

    import emulator_speed as es
    if payload.get("ratelnn_ops"):
        import ratelnn
        ratelnn.tf_init()
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(payload["graph_def"])
    return es.session_runner(graph_def, payload["input"], payload["output"], payload["threads"])


def _tflite(payload: Dict[str, Any]) -> Callable:
    """A TFLite flatbuffer (``model`` bytes) in ``tf.lite.Interpreter`` (XNNPACK)."""
    import emulator_speed as es
    return es.tflite_interpreter(payload["model"], payload["shape"], payload["threads"])


def _ort(payload: Dict[str, Any]) -> Callable:
    """An ONNX model (``model`` bytes) in an ONNX Runtime session (bench/ort_peer.py)."""
    from ort_peer import ort_runner
    return ort_runner(payload["model"], payload["input"], payload["threads"])


def _ratelnn_onnx(payload: Dict[str, Any]) -> Callable:
    """A compiled ONNX model (``model`` bytes) in ``ratelnn.onnx_session``."""
    import ratelnn
    session = ratelnn.onnx_session(payload["model"], intra_op_threads=payload["threads"])
    return lambda batch: session.run([payload["output"]], {payload["input"]: batch})[0]


BUILDERS = {"tf_session": _tf_session, "tflite": _tflite, "ort": _ort, "ratelnn_onnx": _ratelnn_onnx}


class Contender:
    """A contender in a child process: ``Contender(kind, payload, batch)`` builds it there
    (``BUILDERS[kind](payload)``); ``turn(n)`` runs n consecutive calls on ``batch`` and
    returns their seconds; ``close()`` ends the child."""

    def __init__(self, kind: str, payload: Dict[str, Any], batch: np.ndarray) -> None:
        if kind not in BUILDERS:
            raise ValueError(f"unknown contender kind {kind!r}; known: {sorted(BUILDERS)}")
        self.kind = kind
        with tempfile.NamedTemporaryFile(prefix="ratelnn-contender-", suffix=".pkl", delete=False) as f:
            pickle.dump({"kind": kind, "payload": payload, "batch": np.ascontiguousarray(batch)}, f)
            self._spec = f.name
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(BENCH), os.environ.get("PYTHONPATH", "")]))
        self._proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), self._spec], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def turn(self, calls: int) -> List[float]:
        """Seconds of each of ``calls`` consecutive calls, timed in the child."""
        self._proc.stdin.write(json.dumps({"calls": calls}) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.kind} contender's process ended (exit code {self._proc.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the {self.kind} contender failed: {answer['error']}")
        return answer["seconds"]

    def cpu_seconds(self) -> Optional[float]:
        """CPU seconds the child's threads have run (:func:`process_cpu_seconds`)."""
        return process_cpu_seconds(self._proc.pid)

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait()
        if os.path.exists(self._spec):
            os.unlink(self._spec)


class Local:
    """A contender in the bench's own process (for comparisons inside one runtime, or where a
    contender cannot be serialized): the :class:`Contender` interface over ``run(batch)``."""

    def __init__(self, run: Callable, batch: np.ndarray) -> None:
        self.run, self.batch = run, batch

    def turn(self, calls: int) -> List[float]:
        seconds = []
        for _ in range(calls):
            start = time.perf_counter()
            self.run(self.batch)
            seconds.append(time.perf_counter() - start)
        return seconds

    def cpu_seconds(self) -> Optional[float]:
        """None: its threads are the bench's own."""
        return None

    def close(self) -> None:
        pass


def process_cpu_seconds(pid: int) -> Optional[float]:
    """CPU seconds the threads of process ``pid`` have run (Linux schedstat, nanoseconds;
    threads that ended are not counted), None where unknown (no such process, no /proc)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    nanoseconds, read = 0, 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                nanoseconds += int(f.read().split()[0])
            read += 1
        except (OSError, ValueError, IndexError):  # a thread that ended, or no schedstat
            continue
    return nanoseconds / 1e9 if read else None


def wait_until_idle(contenders: Iterable[Any], window: float = IDLE_WINDOW, windows: int = IDLE_WINDOWS,
                    timeout: float = IDLE_TIMEOUT) -> float:
    """Wait until the child processes of ``contenders`` use under a tenth of a core in each of
    ``windows`` consecutive spans of ``window`` seconds (at most ``timeout`` seconds; on a
    loaded machine a spinning thread may miss a span); returns the seconds waited.
    Contenders whose CPU time is unknown (:class:`Local`, no /proc) are not waited for."""
    contenders = list(contenders)
    start, quiet = time.perf_counter(), 0
    while quiet < windows and time.perf_counter() - start < timeout:
        before = [c.cpu_seconds() for c in contenders]
        time.sleep(window)
        after = [c.cpu_seconds() for c in contenders]
        used = sum(b - a for a, b in zip(before, after) if a is not None and b is not None)
        quiet = quiet + 1 if used < 0.1 * window else 0
    return time.perf_counter() - start


def _serve(spec_path: str) -> int:
    """The child: build the contender of ``spec_path``, then answer turns until stdin ends."""
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    out = sys.stdout
    sys.stdout = sys.stderr   # the frameworks' prints must not reach the protocol's pipe
    try:
        run = BUILDERS[spec["kind"]](spec["payload"])
    except Exception as e:   # reported to the parent, which raises it
        out.write(json.dumps({"error": f"building it: {type(e).__name__}: {e}"}) + "\n")
        out.flush()
        return 1
    local = Local(run, spec["batch"])
    for line in sys.stdin:
        try:
            out.write(json.dumps({"seconds": local.turn(int(json.loads(line)["calls"]))}) + "\n")
        except Exception as e:
            out.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1]))
