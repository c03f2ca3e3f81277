"""Distributed calibration on Ray: speed-up from 1 to 2 workers on this machine,
the driver's merge cost per shard, and a paper estimate for 50,000 images on 16 nodes.

Keras MobileNetV2 (weights=None, 96x96x3, batch 16) frozen to a GraphDef; calibration on
random images in-process (``c.calibrate(data)``) and with ``RayExecutor(num_workers=1)`` and
``RayExecutor(num_workers=2)`` (1 thread per worker) on one local Ray instance.  Each Ray
configuration is run once to warm up (actors start, load the op library and the model) and
then timed ``--repeats`` times (median).  The statistics of every run are checked equal to
the in-process run.  The estimate uses the measured per-batch worker time, per-shard
overhead and per-shard merge cost (all from this machine; see the section for the formula).

The result replaces the "Distributed calibration" section of docs/benchmarks.md.

    python bench/distributed.py [--batches 24] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _report import cpu_name, write_section

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "benchmarks.md"
BATCH = 16
IMAGE_SHAPE = (96, 96, 3)
NODES, WORKERS_PER_NODE, IMAGES = 16, 8, 50_000   # the paper cluster


def frozen_mobilenet():
    import keras

    from ratelnn.frontend.tensorflow import freeze_keras
    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=IMAGE_SHAPE, weights=None, alpha=0.5)
    return freeze_keras(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args()

    import ray

    import ratelnn
    from ratelnn.distributed import RayExecutor
    from ratelnn.frontend.tensorflow import converter

    ratelnn.tf_init()
    graph_def, inputs, outputs = frozen_mobilenet()
    images = np.random.default_rng(0).random((args.batches * BATCH, *IMAGE_SHAPE), np.float32)
    tmp = Path(tempfile.mkdtemp(prefix="bench-distributed-"))
    runs = iter(range(10 ** 6))

    def conv():
        return converter(graph_def, {"input_nodes": inputs, "output_nodes": outputs,
                                     "input_shapes": [[BATCH, *IMAGE_SHAPE]],
                                     "output_dir": str(tmp / f"run{next(runs)}")})

    t = time.perf_counter()
    reference = conv().calibrate(images, progress=False)
    in_process = time.perf_counter() - t

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    rows, reports = {}, {}
    for workers in (1, 2):
        ex = RayExecutor(num_workers=workers, threads_per_worker=1, shard_batches=2)
        conv().calibrate(images, progress=False, executor=ex)          # warm-up
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            stats = conv().calibrate(images, progress=False, executor=ex)
            times.append(time.perf_counter() - t)
            assert all(stats[k] == reference[k] and stats[k].histogram == reference[k].histogram
                       for k in reference), "distributed statistics differ from in-process"
        rows[workers], reports[workers] = statistics.median(times), ex.last_run
        ex.shutdown()
    ray.shutdown()

    r2 = reports[2]
    shards = r2.shards
    shard_s = statistics.median(r2.shard_seconds)
    merge_per_shard = r2.merge_seconds / shards
    per_batch = in_process / args.batches          # one process, this machine's 2 threads
    # per-batch worker time and per-shard fixed cost from the 1-worker runs (no contention)
    r1 = reports[1]
    w_batch = statistics.median(r1.shard_seconds) / 2   # shard_batches=2
    # paper cluster: 50k images in shards of 64 batches of 16 (1024 images), 128 workers
    batches_total = -(-IMAGES // BATCH)
    shard_size = 64
    n_shards = -(-batches_total // shard_size)
    waves = -(-n_shards // (NODES * WORKERS_PER_NODE))
    t_workers = waves * shard_size * w_batch
    t_merge = n_shards * merge_per_shard
    t_one = batches_total * per_batch
    estimate = t_workers + t_merge

    section = f"""## Distributed calibration on Ray

Command: `python bench/distributed.py --batches {args.batches} --repeats {args.repeats}`

Keras MobileNetV2 (alpha 0.5, weights=None, {IMAGE_SHAPE[0]}x{IMAGE_SHAPE[1]}x3) frozen; {args.batches} batches of {BATCH} random images; Ray {ray.__version__} local instance with 2 CPUs, 1 thread per worker, 2 batches per shard (data from the driver through the object store); median of {args.repeats} warm runs. Every run's statistics equal the in-process run's (all fields, histograms). {cpu_name()}, {os.cpu_count()} logical CPUs, load average {os.getloadavg()[0]:.2f} at the end.

| run | seconds | batches / s | speed-up vs 1 worker |
|---|---:|---:|---:|
| in-process (`c.calibrate(data)`, TF's own threads) | {in_process:.2f} | {args.batches / in_process:.1f} | - |
| Ray, 1 worker | {rows[1]:.2f} | {args.batches / rows[1]:.1f} | 1.00 |
| Ray, 2 workers | {rows[2]:.2f} | {args.batches / rows[2]:.1f} | {rows[1] / rows[2]:.2f} |

Per shard (2 workers): median worker time {1000 * shard_s:.0f} ms for 2 batches; the driver's merge (read and CRC-check the snapshot, merge, recompute the EMA) costs {1000 * merge_per_shard:.1f} ms per shard ({shards} shards, {1000 * r2.merge_seconds:.0f} ms in all, the merged file written once).

Paper estimate, 50,000 images on 16 nodes x 8 workers (128 workers, 1 thread each), from these measured costs: {batches_total} batches of {BATCH} in {n_shards} shards of {shard_size} batches = {waves} wave(s) of shards; worker time {waves} x {shard_size} x {1000 * w_batch:.0f} ms (this machine's per-batch worker time) = {t_workers:.1f} s, plus merge {n_shards} x {1000 * merge_per_shard:.1f} ms = {t_merge:.1f} s on the driver: about **{estimate:.0f} s**, against {t_one:.0f} s ({t_one / 60:.1f} min) in one process here. Not included: Ray start and actor start (seconds, once), and shipping 50k images of this size from the driver ({IMAGES * np.prod(IMAGE_SHAPE) * 4 / 2**30:.1f} GiB float32; read them on the workers from a shared .npy/.bin/.tar instead). On 2 shared cores the measured speed-up is bounded by the cores: 2 one-thread workers against 1.
"""
    write_section("distributed", section, args.doc)
    print(section)


if __name__ == "__main__":
    sys.exit(main())
