"""Calibration on a Ray cluster: ``c.calibrate(data, executor=RayExecutor(...))``
(docs/distributed.md, docs/architecture.md §13).

The driver (the process that calls ``calibrate``) makes the calibration model once and
ships it, serialized, to Ray actors (:class:`CalibrationWorker`); each actor loads the op
library once.  The data are cut into *shards* of whole consecutive batches of the
single-process batch sequence (the same :class:`~ratelnn.calibration.data.CalibrationData`
batching, the last partial batch padded the same way).  Data that live only on the driver
(arrays, dicts, iterables) go through the Ray object store one shard (block) at a time,
with at most ``2 * workers`` shards in flight; data that name a file (.npy, .bin, .tar) are
read by the workers themselves (the path must be valid on every node).

An actor runs its shard into a private temporary ``output_dir`` and returns the snapshot
file the op library wrote (docs/statistics.md, format 1) plus, per recorded tensor, the
``(min, max)`` of every batch in order.  The driver reads the snapshots with the statistics
reader (CRC-checked), merges them with the statistics merger (min, max, counts and
histograms merge exactly), recomputes the moving averages over the ordered per-batch ranges
of all shards (so ``naive`` with ``enable_EMA`` is exact too), and writes the result as one
new snapshot file into ``config["output_dir"]`` atomically, only once every shard has been
counted exactly once.  A shard whose actor dies is run again on another actor (a dead actor
is replaced); after ``max_attempts`` failures of one shard the run fails with
:class:`CalibrationError` and writes nothing.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .errors import CalibrationError, DistributedError
from .oplib import ONNX_DOMAIN

# environment the driver passes to its workers (read before TensorFlow is imported there)
FORWARDED_ENV = ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL")


# ------------------------------------------------------------------ models on the wire
def serialize_model(framework: str, model: Any) -> bytes:
    """A calibration model as bytes: a TF GraphDef's or an ONNX ModelProto's serialization,
    or for MXNet the pickled ``(symbol JSON, arg params, aux params)`` with numpy parameters."""
    if framework in ("tensorflow", "onnx"):
        return model.SerializeToString()
    import pickle
    symbol, args, aux = model
    return pickle.dumps((symbol.tojson(), {k: v.asnumpy() for k, v in args.items()},
                         {k: v.asnumpy() for k, v in aux.items()}), protocol=4)


def _tf_ancestors(graph_def, outputs: Sequence[str]) -> set:
    inputs = {n.name: [i.lstrip("^").split(":")[0] for i in n.input] for n in graph_def.node}
    seen, stack = set(), [o.split(":")[0] for o in outputs]
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(inputs.get(name, ()))
    return seen


class _TFModel:
    """A serialized TF calibration model, re-targeted at a private output_dir per shard."""

    def __init__(self, data: bytes, output_nodes: Sequence[str]) -> None:
        import tensorflow as tf
        self.graph_def = tf.compat.v1.GraphDef.FromString(data)
        self.output_nodes = list(output_nodes)
        live = _tf_ancestors(self.graph_def, self.output_nodes)
        # only the MinMax ops a single-process run executes (ancestors of the outputs)
        self.recorders = [(n.name, n.attr["tensor_name"].s.decode()) for n in self.graph_def.node
                          if n.op == "RatelMinMax" and n.name in live]

    def runner(self, output_dir: str, runner_class: Any):
        import tensorflow as tf
        graph_def = tf.compat.v1.GraphDef()
        graph_def.CopyFrom(self.graph_def)
        for node in graph_def.node:
            if node.op == "RatelMinMax":
                node.attr["output_dir"].s = output_dir.encode()
        return runner_class(graph_def), self.output_nodes + [name for name, _ in self.recorders]


class _MXModel:
    """A serialized MXNet calibration model, re-targeted at a private output_dir per shard."""

    def __init__(self, data: bytes, output_nodes: Sequence[str]) -> None:
        import json
        import pickle
        self.symbol_json, self.args, self.aux = pickle.loads(data)
        self.output_nodes = list(output_nodes)
        nodes = json.loads(self.symbol_json)["nodes"]
        self.recorders = [(n["name"], n.get("attrs", {}).get("tensor_name", n["name"]))
                          for n in nodes if n["op"] == "ratel_minmax"]

    def runner(self, output_dir: str, runner_class: Any):
        import json
        from .mxnet_compat import import_mxnet
        mx = import_mxnet()
        document = json.loads(self.symbol_json)
        for node in document["nodes"]:
            if node["op"] == "ratel_minmax":
                node.setdefault("attrs", {})["output_dir"] = output_dir
        symbol = mx.sym.load_json(json.dumps(document))
        model = (symbol, {k: mx.nd.array(v) for k, v in self.args.items()},
                 {k: mx.nd.array(v) for k, v in self.aux.items()})
        return runner_class(model), self.output_nodes + [name for name, _ in self.recorders]


class _ONNXModel:
    """A serialized ONNX calibration model, re-targeted at a private output_dir per shard."""

    def __init__(self, data: bytes, output_nodes: Sequence[str]) -> None:
        from .frameworks import import_framework
        self.model = import_framework("onnx").ModelProto.FromString(data)
        self.output_nodes = list(output_nodes)
        # every RatelMinMax records at each run of ratelnn.onnx_session; its output is its input
        self.recorders = [(n.output[0], _string_attr(n, "tensor_name")) for n in self._minmax(self.model)]

    @staticmethod
    def _minmax(model: Any) -> List[Any]:
        return [n for n in model.graph.node if n.domain == ONNX_DOMAIN and n.op_type == "RatelMinMax"]

    def runner(self, output_dir: str, runner_class: Any):
        model = type(self.model)()
        model.CopyFrom(self.model)
        for node in self._minmax(model):
            next(a for a in node.attribute if a.name == "output_dir").s = output_dir.encode()
        return runner_class(model), self.output_nodes + [name for name, _ in self.recorders]


def _string_attr(node: Any, name: str) -> str:
    return next(a.s for a in node.attribute if a.name == name).decode()


_MODELS = {"tensorflow": _TFModel, "mxnet": _MXModel, "onnx": _ONNXModel}


# ------------------------------------------------------------------ the worker (a Ray actor)
class CalibrationWorker:
    """Runs shards of a calibration in one process (wrapped by ``ray.remote``)."""

    def __init__(self, framework: str, threads: Optional[int], env: Mapping[str, str], runner_class: Any) -> None:
        os.environ.update(env)
        if threads:
            for key in ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS"):
                os.environ[key] = str(threads)
            os.environ["TF_NUM_INTEROP_THREADS"] = "1"
        from . import oplib
        self.framework = framework
        self.runner_class = runner_class   # unpickled by reference: its module is imported here
        {"tensorflow": oplib.tf_init, "mxnet": oplib.mx_init, "onnx": oplib.ort_init}[framework]()
        self.model_key: Optional[str] = None
        self.model: Any = None
        self.session: Any = None   # (model key, runner, fetches, output_dir)
        self.root = tempfile.mkdtemp(prefix="ratelnn-ray-")

    def pid(self) -> int:
        return os.getpid()

    def _load(self, key: str, model_ref: List[Any], output_nodes: Sequence[str]) -> None:
        if key != self.model_key:
            import ray
            data = ray.get(model_ref[0])
            self.model = _MODELS[self.framework](data, output_nodes)
            self.model_key = key

    def _batches(self, payload: Dict[str, Any]) -> Iterator[Dict[str, np.ndarray]]:
        if "feeds" in payload:
            import ray
            yield from ray.get(payload["feeds"][0])
            return
        from .calibration.data import CalibrationData
        data = CalibrationData(payload["path"], payload["inputs"], payload["config"],
                               payload["batch_size"], self.framework)
        for batch in data.batches(payload["start"], payload["stop"]):
            yield batch.feeds

    def run(self, key: str, model_ref: List[Any], output_nodes: Sequence[str], shard: int,
            attempt: int, payload: Dict[str, Any]) -> Dict[str, Any]:
        """Run one shard; returns its snapshot bytes, per-tensor per-batch ranges, batch count."""
        from . import oplib
        from .calibration.stats import STATS_SUFFIX, statistics_dir
        start_time = time.perf_counter()
        self._load(key, model_ref, output_nodes)
        forget = getattr(oplib, "forget_statistics", None)
        if forget is not None:
            # one session per model: the store's entry of its directory is dropped after
            # each shard, so the next shard starts from nothing
            if self.session is None or self.session[0] != key:
                if self.session is not None:
                    self.session[1].close()
                output_dir = os.path.join(self.root, "model")
                self.session = (key, *self.model.runner(output_dir, self.runner_class), output_dir)
            _, runner, fetches, output_dir = self.session
        else:  # an op library that cannot drop statistics: a directory and session per shard
            output_dir = os.path.join(self.root, f"shard-{shard}-{attempt}")
            runner, fetches = self.model.runner(output_dir, self.runner_class)
        recorders = self.model.recorders
        first = len(fetches) - len(recorders)
        ranges: Dict[str, List[Tuple[float, float]]] = {t: [] for _, t in recorders}
        batches = 0
        try:
            for feeds in self._batches(payload):
                outputs = runner.run(feeds, fetches)
                for (_, tensor), value in zip(recorders, outputs[first:]):
                    if value.size:  # the op skips empty tensors
                        ranges[tensor].append((float(value.min()), float(value.max())))
                batches += 1
            if forget is None:
                runner.close()
            oplib.flush_statistics()
            files = sorted(p for p in statistics_dir(output_dir).glob("*" + STATS_SUFFIX)
                           if not p.name.startswith("."))
            snapshots = [p.read_bytes() for p in files]
        finally:
            if forget is not None:
                forget(output_dir)
            shutil.rmtree(statistics_dir(output_dir), ignore_errors=True)
        return {"shard": shard, "snapshots": snapshots, "batches": batches, "pid": os.getpid(),
                "ranges": {t: np.asarray(r, np.float32).reshape(-1, 2) for t, r in ranges.items()},
                "seconds": time.perf_counter() - start_time}


def apply_to_block(fn: Any, block: Any) -> Any:
    """``fn(block)``: the body of the Ray task of :meth:`RayExecutor.map_blocks`."""
    return fn(block)


# ------------------------------------------------------------------ merging on the driver
def merge_shard_results(results: Sequence[Dict[str, Any]], ema_decay: float):
    """Statistics of all shards (in shard order) as one process running every batch in
    order would have recorded them: tensor name -> TensorStats."""
    from .calibration.snapshot import ordered_emas
    from .calibration.stats import merge_stats, read_statistics_file
    parts: Dict[str, list] = collections.defaultdict(list)
    ranges: Dict[str, list] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="ratelnn-merge-") as tmp:
        for result in results:
            for k, data in enumerate(result["snapshots"]):
                path = Path(tmp) / f"shard-{result['shard']}-{k}.rstats"
                path.write_bytes(data)
                for name, stats in read_statistics_file(path).items():
                    parts[name].append(stats)
            for name, r in result["ranges"].items():
                ranges[name].append(r)
    merged = {}
    for name in sorted(parts):
        stats = merge_stats(parts[name])
        ordered = np.concatenate(ranges[name]) if ranges.get(name) else np.zeros((0, 2), np.float32)
        if len(ordered) != stats.batches:
            raise CalibrationError(
                f"distributed calibration: tensor {name!r} has {stats.batches} recorded "
                f"batches but {len(ordered)} per-batch ranges came back; statistics not written")
        ema_min, ema_max = ordered_emas(ordered.tolist(), ema_decay)
        merged[name] = dataclasses.replace(stats, ema_min=ema_min, ema_max=ema_max)
    return merged


@dataclasses.dataclass
class RunReport:
    """What the last distributed calibration did (for tests, logs and the benchmark)."""

    shards: int = 0
    batches: int = 0
    attempts: int = 0                     # shard runs started, retries included
    retried_shards: List[int] = dataclasses.field(default_factory=list)
    workers_lost: int = 0
    shard_seconds: List[float] = dataclasses.field(default_factory=list)
    merge_seconds: float = 0.0
    seconds: float = 0.0
    pids: Dict[int, int] = dataclasses.field(default_factory=dict)   # shard -> worker pid


# ------------------------------------------------------------------ the executor
class RayExecutor:
    """Runs calibration shards on Ray actors.

    ``address``: None starts a local Ray instance (loopback only, no dashboard) or joins
    the one ``RAY_ADDRESS`` names; ``"auto"``, ``"host:port"`` or ``"ray://host:10001"``
    joins an existing cluster (``ray start --head``).  ``num_workers``: actors (default: the
    cluster's CPUs // ``threads_per_worker``); ``threads_per_worker``: CPUs each actor
    reserves and TensorFlow's intra-op threads there (default 1).  ``shard_batches``:
    batches per shard (default: about 4 shards per worker).  ``max_attempts``: runs of one
    shard before the calibration fails.  Use as a context manager or call
    :meth:`shutdown`; Ray itself is shut down only if this executor started it.
    """

    def __init__(self, address: Optional[str] = None, num_workers: Optional[int] = None,
                 threads_per_worker: Optional[int] = None, shard_batches: Optional[int] = None,
                 max_attempts: int = 3) -> None:
        try:
            import ray
        except ImportError:
            raise ImportError("RayExecutor needs Ray: pip install 'ratelnn[distributed]'") from None
        self.ray = ray
        self.threads = int(threads_per_worker or 1)
        self.shard_batches = shard_batches
        self.max_attempts = int(max_attempts)
        self.started_ray = False
        if not ray.is_initialized():
            kwargs: Dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "configure_logging": False}
            if address is None and not os.environ.get("RAY_ADDRESS"):
                # a new local instance on this machine (Ray maps 127.0.0.1 to the host's own
                # address, token-authenticated), CPUs for the workers asked for
                kwargs["_node_ip_address"] = "127.0.0.1"
                if num_workers:
                    kwargs["num_cpus"] = int(num_workers) * self.threads
            ray.init(address=address, **kwargs)
            self.started_ray = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.num_workers = int(num_workers or max(1, cpus // self.threads))
        self.actors: List[Any] = []
        self.framework: Optional[str] = None
        self.last_run = RunReport()
        self._models: Dict[str, Any] = {}

    # ---- actors
    def _new_actor(self):
        remote = self.ray.remote(CalibrationWorker).options(num_cpus=self.threads, max_restarts=0)
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        from .runners import runner_class
        return remote.remote(self.framework, self.threads, env, runner_class(self.framework))

    def _ensure_actors(self, framework: str) -> None:
        if self.framework != framework:
            self._kill_actors()
            self.framework = framework
        while len(self.actors) < self.num_workers:
            self.actors.append(self._new_actor())
        # replace actors that died since the last run (killed, node lost)
        pings = {actor.pid.remote(): i for i, actor in enumerate(self.actors)}
        for ref, i in pings.items():
            try:
                self.ray.get(ref)
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.WorkerCrashedError):
                self.actors[i] = self._new_actor()

    def _kill_actors(self) -> None:
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # already dead
                pass
        self.actors = []

    def shutdown(self) -> None:
        """Stop the actors, and Ray if this executor started it."""
        self._kill_actors()
        self._models.clear()
        if self.started_ray and self.ray.is_initialized():
            self.ray.shutdown()
        self.started_ray = False

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def _on_shard_done(self, shard: int, actor_index: int) -> None:
        """Called on the driver after each shard result arrives (a hook for tests)."""

    def _on_shard_submitted(self, shard: int, actor_index: int) -> None:
        """Called on the driver right after a shard is sent to an actor (a hook for tests)."""

    # ---- any function over blocks of items
    def map_blocks(self, fn: Any, items: Any, total: Optional[int] = None, label: str = "",
                   progress: bool = True, block_size: Optional[int] = None) -> List[Any]:
        """``[fn(block) for block in blocks]`` run as Ray tasks, results in block order.

        ``items`` (any iterable, e.g. batches of a data source that lives only on the
        driver) is cut into blocks of ``block_size`` items (default ``shard_batches``, else
        about 4 blocks per worker of ``total`` items); each block goes through the object
        store when it is submitted, with at most two blocks per worker in flight, so an
        iterable is streamed, never held whole.  ``fn`` (picklable) is shipped once.  A block
        whose worker dies is run again by Ray (``max_attempts`` runs at most); an exception
        raised by ``fn`` is raised here with its own type.  The calibration actors are stopped
        first (they reserve their CPUs; the next ``calibrate`` starts them again).  Used by ``analyze(executor=)``,
        joint builds and the zoo's evaluation (docs/distributed.md)."""
        from .calibration.progress import Progress
        ray = self.ray
        # calibration actors hold their CPUs while they live: on a cluster they fill, tasks
        # would never be scheduled; they are started again by the next calibrate()
        self._kill_actors()
        size = int(block_size or self.shard_batches
                   or (max(1, -(-total // (4 * self.num_workers))) if total else 8))
        task = ray.remote(apply_to_block).options(num_cpus=self.threads,
                                                  max_retries=self.max_attempts - 1)
        fn_ref = ray.put(fn)
        iterator = iter(items)
        results: Dict[int, Any] = {}
        inflight: Dict[Any, Tuple[int, int]] = {}
        submitted = 0
        with Progress(total, label or "map on Ray", enabled=progress) as bar:
            while True:
                while len(inflight) < 2 * self.num_workers:
                    block = list(itertools.islice(iterator, size))
                    if not block:
                        break
                    inflight[task.remote(fn_ref, ray.put(block))] = (submitted, len(block))
                    submitted += 1
                if not inflight:
                    break
                ready, _ = ray.wait(list(inflight), num_returns=1)
                index, count = inflight.pop(ready[0])
                try:
                    results[index] = ray.get(ready[0])
                except ray.exceptions.RayTaskError as e:
                    for ref in inflight:
                        ray.cancel(ref)
                    raise e.as_instanceof_cause() from None
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as e:
                    for ref in inflight:
                        ray.cancel(ref)
                    raise DistributedError(f"{label or 'map on Ray'}: block {index} was lost with its "
                                           f"worker {self.max_attempts} time(s): {type(e).__name__}") from None
                bar.update(count)
        return [results[i] for i in range(submitted)]

    # ---- shards
    def _shards(self, converter: Any, data: Any, batch_size: Optional[int]):
        """(number of batches or None, iterator of shard payloads)."""
        batches = converter.calibration_data(data, batch_size)
        total = batches.num_batches
        per_shard = self.shard_batches or (max(1, -(-total // (4 * self.num_workers)))
                                           if total else 8)
        if isinstance(data, (str, os.PathLike)) and total:
            spec = {"path": os.path.abspath(os.fspath(data)), "inputs": batches.inputs,
                    "config": batches.config, "batch_size": batches.batch_size}

            def from_file():
                for start in range(0, total, per_shard):
                    yield dict(spec, start=start, stop=min(total, start + per_shard)), \
                        min(total, start + per_shard) - start
            return total, from_file()

        def from_driver():
            block: List[Dict[str, np.ndarray]] = []
            for batch in batches:
                block.append(batch.feeds)
                if len(block) == per_shard:
                    yield {"feeds": [self.ray.put(block)]}, len(block)
                    block = []
            if block:
                yield {"feeds": [self.ray.put(block)]}, len(block)
        return total, from_driver()

    def calibrate(self, converter: Any, data: Any, batch_size: Optional[int] = None,
                  progress: bool = True):
        """``converter.calibrate(data, executor=self)``: see the module docstring."""
        from .calibration.progress import Progress
        from .calibration.snapshot import write_statistics
        from .calibration.stats import load_statistics
        ray = self.ray
        started = time.perf_counter()
        framework = converter.handler.framework
        config = converter.config
        model = converter.to_cal()  # also claims output_dir for this model
        data_bytes = serialize_model(framework, model)
        import hashlib
        key = hashlib.sha256(data_bytes).hexdigest()
        if key not in self._models:
            self._models = {key: ray.put(data_bytes)}
        model_ref = [self._models[key]]
        output_nodes = list(config["output_nodes"])
        self._ensure_actors(framework)
        total, shards = self._shards(converter, data, batch_size)

        report = RunReport()
        self.last_run = report
        results: Dict[int, Dict[str, Any]] = {}
        retry: "collections.deque" = collections.deque()   # (shard, payload, size, attempts)
        inflight: Dict[Any, Tuple[int, Any, int, int, int, Any]] = {}
        load = {i: 0 for i in range(len(self.actors))}
        next_shard = 0
        exhausted = False
        depth = 2

        def submit(index: int, shard: int, payload: Any, size: int, attempts: int) -> None:
            ref = self.actors[index].run.remote(key, model_ref, output_nodes, shard, attempts,
                                                payload["call"])
            inflight[ref] = (shard, payload, size, attempts, index, self.actors[index])
            load[index] += 1
            report.attempts += 1
            self._on_shard_submitted(shard, index)

        label = f"calibrate on {self.num_workers} Ray workers"
        with Progress(total, label, enabled=progress) as bar:
            while True:
                for index in sorted(load, key=load.get):
                    while load[index] < depth:
                        if retry:
                            shard, payload, size, attempts = retry.popleft()
                        elif not exhausted:
                            try:
                                call, size = next(shards)
                            except StopIteration:
                                exhausted = True
                                break
                            shard, payload, attempts = next_shard, {"call": call}, 0
                            next_shard += 1
                        else:
                            break
                        submit(index, shard, payload, size, attempts)
                if not inflight:
                    break
                ready, _ = ray.wait(list(inflight), num_returns=1)
                ref = ready[0]
                shard, payload, size, attempts, index, actor = inflight.pop(ref)
                load[index] -= 1
                try:
                    result = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as e:
                    self._replace_dead(index, actor, report)
                    if attempts + 1 >= self.max_attempts:
                        raise CalibrationError(
                            f"distributed calibration failed: shard {shard} ({size} batches) "
                            f"was lost with its worker {attempts + 1} time(s) (max_attempts="
                            f"{self.max_attempts}); no statistics were written to "
                            f"{config['output_dir']}: {type(e).__name__}") from None
                    report.retried_shards.append(shard)
                    retry.append((shard, payload, size, attempts + 1))
                    continue
                except ray.exceptions.RayTaskError as e:
                    cause = e.as_instanceof_cause()
                    raise CalibrationError(
                        f"distributed calibration failed in shard {shard}: {cause}; no "
                        f"statistics were written to {config['output_dir']}") from e
                if shard in results:  # cannot happen: a shard is submitted again only if lost
                    raise CalibrationError(f"distributed calibration: shard {shard} returned twice")
                if result["batches"] != size:
                    raise CalibrationError(f"distributed calibration: shard {shard} ran "
                                           f"{result['batches']} batches, expected {size}")
                results[shard] = result
                report.shard_seconds.append(result["seconds"])
                report.pids[shard] = result["pid"]
                bar.update(size)
                self._on_shard_done(shard, index)

        report.shards = len(results)
        report.batches = sum(r["batches"] for r in results.values())
        if report.shards != next_shard or sorted(results) != list(range(next_shard)):
            raise CalibrationError("distributed calibration: shards missing; nothing written")
        merge_start = time.perf_counter()
        decay = float(np.float32(config.get("ema_decay", 0.9)))  # the op's float attribute
        merged = merge_shard_results([results[s] for s in range(report.shards)], decay)
        if not merged:
            raise CalibrationError("distributed calibration recorded no statistics")
        write_statistics(config["output_dir"], merged)
        report.merge_seconds = time.perf_counter() - merge_start
        report.seconds = time.perf_counter() - started
        return load_statistics(config["output_dir"])

    def _replace_dead(self, index: int, actor: Any, report: RunReport) -> None:
        """``actor`` (at ``index``) died: start a new one in its place, once (the other
        shards queued on the dead actor fail too and are retried)."""
        if self.actors[index] is not actor:
            return
        report.workers_lost += 1
        try:
            self.ray.kill(actor)
        except Exception:
            pass
        self.actors[index] = self._new_actor()
