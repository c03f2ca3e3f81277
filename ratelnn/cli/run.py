"""``ratelnn run MODEL --input X.npy``: run a model (a compiled one runs its engines on the emulated
NPU; an ONNX model runs in ``ratelnn.onnx_session``), print or save the outputs, print the
device time."""
from __future__ import annotations

import io
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from ..errors import RatelError
from ..fileio import write_atomic
from .common import (EXIT_OK, FRAMEWORKS, UsageError, detect_framework, existing, frontend, load_model,
                     model_structure, one_line)


class InputError(RatelError, ValueError):
    """The input data's contents are unusable (NaN/Inf, strings): exit code 1."""


def add_parser(sub, parents) -> None:
    p = sub.add_parser("run", parents=parents, help="run a (compiled) model on numpy input")
    p.add_argument("model", metavar="MODEL", help=".pb, .onnx, or MXNet checkpoint prefix")
    p.add_argument("--input", required=True, help=".npy array (one input) or dict of arrays")
    p.add_argument("--output", help="save outputs here (.npy; a dict of arrays for several outputs)")
    p.add_argument("--framework", choices=FRAMEWORKS)
    p.add_argument("--input-node", action="append", metavar="NAME", help="input to feed (default: the model's)")
    p.add_argument("--output-node", action="append", metavar="NAME", help="output to fetch; repeatable")
    p.set_defaults(handler=run)


def load_input(path: str) -> Any:
    """An array, a ``.npz`` archive, or the dict of arrays of a pickled ``np.save(path, {...})``
    (unpickled: trusted files only); archives and dicts give ``{input name: array}``."""
    existing(path, "input file")
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic != b"\x93NUMPY" and not magic.startswith(b"PK"):
        raise UsageError(f"input file {path}: not a .npy or .npz file (it starts with {magic!r}); "
                         "save the input with numpy.save or numpy.savez")
    try:
        value = np.load(path, allow_pickle=False)
        if isinstance(value, np.lib.npyio.NpzFile):
            with value:
                return {k: value[k] for k in value.files}
        return value
    except ValueError as e:
        if "allow_pickle" not in str(e):
            raise UsageError(f"input file {path}: not a .npy array: {one_line(e)}") from None
    value = np.load(path, allow_pickle=True)
    if value.shape == () and isinstance(value.item(), dict):
        return {str(k): np.asarray(v) for k, v in value.item().items()}
    raise UsageError(f"input file {path}: holds objects; expected an array or a dict of arrays")


def feeds_for(data: Any, inputs: List[Dict[str, Any]], names: Optional[List[str]]) -> Dict[str, np.ndarray]:
    """Feed dict for the model inputs ``inputs`` (from ``model_structure``); ``names``
    (``--input-node``) may also name other tensors to feed."""
    dtypes = {i["name"]: i["dtype"] for i in inputs}
    if isinstance(data, dict):
        feeds = data
    else:
        names = names or [i["name"] for i in inputs]
        if len(names) != 1:
            raise UsageError(f"the model has inputs {names}: give --input-node, or a .npy dict of "
                             "input name -> array")
        feeds = {names[0]: data}
    unknown = [k for k in feeds if k.split(":")[0] not in dtypes and k not in (names or [])]
    if unknown:
        raise UsageError(f"unknown input(s) {unknown}; the model's inputs are {sorted(dtypes)}")
    out = {}
    for k, v in feeds.items():
        dtype = dtypes.get(k.split(":")[0], "")
        v = np.asarray(v)
        if v.dtype.kind not in "fiub":
            raise InputError(f"input {k!r} holds {v.dtype} values; expected real numbers")
        if v.dtype.kind == "f" and not np.all(np.isfinite(v)):
            bad = int(np.count_nonzero(~np.isfinite(v)))
            raise InputError(f"input {k!r} holds {bad} NaN or Inf value(s) of {v.size}")
        # float inputs are converted to the input's float type (np.save keeps float64)
        out[k] = v.astype(dtype) if v.dtype.kind == "f" and dtype.startswith("float") else v
    return out


def run(args) -> int:
    """Run a model on numpy input, save/print outputs and device time."""
    framework = detect_framework(args.model, args.framework)
    stored = load_model(args.model, framework)
    structure = model_structure(args.model, framework, stored)
    feeds = feeds_for(load_input(args.input), structure["inputs"], args.input_node)
    fetches = args.output_node or [o["name"] for o in structure["outputs"]]
    from ..npu import device_time, reset_device_time
    from ..profile import compiled_batch_sizes, profile, run_latency
    from ..runners import run_model
    if framework == "tensorflow":
        from ..oplib import tf_init
        tf_init()
        model = stored
    elif framework == "mxnet":
        model = frontend(framework).model_io.load_checkpoint(stored)
    else:   # ONNX: ratelnn.onnx_session runs the ratelnn ops
        model = stored
    reset_device_time()
    fixed = {i["shape"][0] for i in structure["inputs"] if i["shape"] and i["shape"][0] is not None}
    batch = fixed.pop() if len(fixed) == 1 else None
    outputs = run_in_batches(lambda chunk: run_model(framework, model, chunk, fetches), feeds, batch)
    spent = device_time()
    for name, value in zip(fetches, outputs):
        print(f"output {name}: shape {list(value.shape)} {value.dtype}, min {value.min():.6g}, "
              f"max {value.max():.6g}, mean {value.mean():.6g}")
        if args.output is None:
            print(np.array2string(value, threshold=40, precision=5))
    if args.output is not None:
        result = outputs[0] if len(outputs) == 1 else dict(zip(fetches, outputs))
        buffer = io.BytesIO()
        np.save(buffer, result, allow_pickle=isinstance(result, dict))
        write_atomic(args.output, buffer.getvalue())
        print(f"wrote {args.output}")
    if spent.runs:
        print(f"device time (recorded): {spent.seconds * 1e3:.4f} ms for {spent.runs} engine runs, "
              f"{spent.samples} samples, {spent.cycles:,.0f} cycles")
    if structure["engines"]:
        batch = batch or len(next(iter(feeds.values())))
        sizes = compiled_batch_sizes(model)
        if len(sizes) > 1:   # an engine set per node: the batch is split (docs/multi-batch.md)
            print(f"device time (cost model): {run_latency(model, batch) * 1e3:.4f} ms per batch of {batch} "
                  f"split over the compiled batch sizes {sizes}")
        else:
            predicted = profile(model, batch)
            print(f"device time (cost model): {predicted.latency_s * 1e3:.4f} ms per batch of {batch}, "
                  f"throughput {predicted.throughput:,.0f} inferences/s")
    else:
        print("no NPU engine in this model: everything ran in the framework")
    return EXIT_OK


def run_in_batches(run: Callable[[Dict[str, np.ndarray]], List[np.ndarray]], feeds: Dict[str, np.ndarray],
                   batch: Optional[int]) -> List[np.ndarray]:
    """``run(feeds)``, or, for a model whose inputs fix the batch to ``batch`` rows, ``run``
    on consecutive slices of ``batch`` rows (the last one completed by repeating its own
    rows) with the real rows of each output concatenated."""
    rows = {len(v) for v in feeds.values()}
    if len(rows) != 1:
        raise UsageError(f"the inputs have different numbers of rows: { {k: len(v) for k, v in feeds.items()} }")
    n = rows.pop()
    if batch is None or n == batch:
        return run(feeds)
    parts: List[List[np.ndarray]] = []
    for start in range(0, n, batch):
        real = min(batch, n - start)
        take = start + np.arange(batch) % real
        outputs = run({k: v[take] for k, v in feeds.items()})
        parts.append([o[:real] for o in outputs])
    return [np.concatenate(chunks) for chunks in zip(*parts)]
