"""Engine sets (docs/multi-batch.md).

One compiled model (``static_batch_sizes`` or ``max_dynamic_batch_size``) serves batches 1,
3, 4, 9 and 16 through the real TensorFlow and MXNet engine ops with outputs bit-identical
to batch-1 runs; every compiled size shares one copy of the weights (the model is barely
larger than a single-size one); the compiler is never called at run time; a remainder runs
as the split the cost model predicts cheaper (3 = 2 + 1, or 3 padded to 4); the device-time
account of a run is the sum of its chunks at their compiled sizes (padding included), which
checks the C++ split rule against ratelnn/npu/batching.py.  Models that store one engine
per size (attr ``batch_engines``) still load and run.
"""
from __future__ import annotations

import numpy as np
import pytest

import ratelnn
from ratelnn.compiler import compile as compile_mod
from ratelnn.compiler import run_compiled
from ratelnn.config import ConfigError
from ratelnn.errors import RatelError
from ratelnn.npu import batching
from ratelnn.npu.batching import batch_slots, decode_engine_set, expand_engine_set, plan_batches
from ratelnn.npu.device_time import device_time, reset_device_time
from ratelnn.npu.format import seal
from ratelnn.profile import profile_batch_sizes, run_chunks, run_latency
from ratelnn.runners import run_model

BATCHES = (1, 3, 4, 9, 16)
# tests marked no_tf_math run MXNet, IR graphs or config checks only (tests/conftest.py)


def _tf_model(hidden: int = 0):
    """Conv -> max pool -> flatten (-> dense ``hidden``, relu) -> dense 5, on 8x8x3 inputs."""
    import tensorflow as tf
    from tensorflow.keras import layers

    from ratelnn.frontend.tensorflow import freeze_keras
    tf.keras.utils.set_random_seed(0)
    inp = tf.keras.Input((8, 8, 3))
    x = layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    if hidden:
        x = layers.Dense(hidden, activation="relu")(x)
    out = layers.Dense(5)(x)
    return freeze_keras(tf.keras.Model(inp, out))


def _no_compiling(monkeypatch):
    """Make any compile step at run time fail loudly."""
    def boom(*args, **kwargs):
        raise AssertionError("the compiler ran at run time")
    monkeypatch.setattr(compile_mod, "lower_region", boom)
    monkeypatch.setattr(compile_mod, "with_batch_plans", boom)
    monkeypatch.setattr(batching, "rebatch", boom)


def _engine_sets(graph_def):
    nodes = [nd for nd in graph_def.node if nd.op == "RatelEngineOp"]
    assert nodes
    return {nd.attr["engine_name"].s.decode():
            decode_engine_set(nd.attr["engine"].s, list(nd.attr["batch_engines"].list.s)) for nd in nodes}


def _expected_cycles(engines, n):
    """Device-time cycles of one run of n samples (docs/multi-batch.md): each chunk at its
    compiled batch on the busiest core of a batch-split engine."""
    total = 0.0
    by_size = {e.batch_size: e for e in expand_engine_set(engines)}
    costs = {size: sum(i.cycles for i in e.instructions) / size * -(-size // len(e.proto.core_ids))
             for size, e in by_size.items()}
    for size, _, _ in plan_batches(sorted(costs), n, [costs[b] for b in sorted(costs)]):
        total += costs[size]
    return total


def _check_batches(framework, model, input_name, output_name, x):
    single = np.concatenate([run_model(framework, model, {input_name: x[i:i + 1]}, [output_name])[0]
                             for i in range(max(BATCHES))])
    for batch in BATCHES:
        got = run_model(framework, model, {input_name: x[:batch]}, [output_name])[0]
        np.testing.assert_array_equal(got, single[:batch], err_msg=f"batch {batch}")


@pytest.mark.no_tf_math
def test_plan_batches_rule():
    """Full chunks of the largest size, then the remainder as the cheapest chunks: least
    cycles, then fewest padded samples, then fewest chunks."""
    flat = [100.0, 100.0, 100.0]   # every chunk costs the same: one chunk, the least padded
    assert plan_batches([1, 4, 16], 9, flat) == [(16, 0, 9)]
    assert plan_batches([1, 4, 16], 4, flat) == [(4, 0, 4)]
    assert plan_batches([1, 4, 16], 35, flat) == [(16, 0, 16), (16, 16, 16), (4, 32, 3)]   # less padding
    linear = [1.0, 4.0, 16.0]      # cycles proportional to the size: no padding
    assert plan_batches([1, 4, 16], 9, linear) == [(4, 0, 4), (4, 4, 4), (1, 8, 1)]
    assert plan_batches([1, 4, 16], 35, linear) == [(16, 0, 16), (16, 16, 16), (1, 32, 1), (1, 33, 1), (1, 34, 1)]
    assert plan_batches([1, 2, 4], 3, [10.0, 12.0, 30.0]) == [(2, 0, 2), (1, 2, 1)]   # 22 < 30
    assert plan_batches([1, 2, 4], 3, [10.0, 12.0, 21.0]) == [(4, 0, 3)]              # 21 < 22
    assert plan_batches([1, 2, 4, 8], 9) == [(8, 0, 8), (1, 8, 1)]   # no costs: the fewest padded samples
    falling = [300.0, 200.0, 100.0]   # larger chunks cheaper: still padded only to the smallest size that holds them
    assert plan_batches([1, 4, 16], 1, falling) == [(1, 0, 1)]
    assert plan_batches([1, 4, 16], 3, falling) == [(4, 0, 3)]
    assert plan_batches([4], 0) == []
    assert compile_mod.engine_batch_sizes({"max_dynamic_batch_size": 8}) == [1, 2, 4, 8]
    assert compile_mod.engine_batch_sizes({"max_dynamic_batch_size": 6}) == [1, 2, 4, 6]
    assert compile_mod.engine_batch_sizes({"static_batch_sizes": [16, 1, 4]}) == [1, 4, 16]
    assert compile_mod.engine_batch_sizes({}) == []


@pytest.mark.no_tf_math
def test_config_keys_are_checked(tmp_path):
    from ratelnn.config import normalize
    base = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[1, 4]], "output_dir": str(tmp_path)}
    for bad, key in (({"static_batch_sizes": [0, 4]}, "static_batch_sizes"),
                     ({"static_batch_sizes": [1.5]}, "static_batch_sizes"),
                     ({"max_dynamic_batch_size": -2}, "max_dynamic_batch_size"),
                     ({"compiler_check": 5}, "compiler_check"),
                     ({"static_batch_sizes": [4], "max_dynamic_batch_size": 8}, "max_dynamic_batch_size")):
        with pytest.raises(ConfigError, match=key):
            normalize({**base, **bad}, "tensorflow")


def test_tensorflow_static_batch_sizes(tmp_path, monkeypatch, capsys):
    from ratelnn.frontend.tensorflow import converter
    ratelnn.tf_init()
    graph_def, ins, outs = _tf_model()
    rng = np.random.default_rng(0)
    c = converter(graph_def, {"input_nodes": ins, "output_nodes": outs, "input_shapes": [[2, 8, 8, 3]],
                              "output_dir": str(tmp_path), "static_batch_sizes": [16, 1, 4]})
    c.calibrate(rng.random((16, 8, 8, 3), dtype=np.float32), progress=False)
    npu = c.to_npu()
    sets = _engine_sets(npu)
    for engines in sets.values():
        assert len(engines) == 1 and engines[0].batch_sizes == [1, 4, 16]   # one engine, its batch plans
        per_size = expand_engine_set(engines)
        assert [e.batch_size for e in per_size] == [1, 4, 16]
        assert per_size[2].proto.sram_bytes > per_size[0].proto.sram_bytes   # planned per batch size
    _no_compiling(monkeypatch)
    x = rng.random((16, 8, 8, 3), dtype=np.float32)
    _check_batches("tensorflow", npu, ins[0], outs[0], x)
    # the account follows the split of each engine (the remainder as the cost model's cheaper chunks)
    for n in (9, 20):
        reset_device_time()
        run_model("tensorflow", npu, {ins[0]: np.resize(x, (n, 8, 8, 3))}, [outs[0]])
        for name, engines in sets.items():
            t = device_time(name)
            assert (t.runs, t.samples) == (1, n)
            assert t.cycles == pytest.approx(_expected_cycles(engines, n), rel=1e-9)
    # the cost model per compiled batch size: ratelnn.profile and `ratelnn inspect`
    per_size = profile_batch_sizes(npu)
    assert sorted(per_size) == [1, 4, 16]
    assert per_size[16].throughput > per_size[1].throughput
    chunks = dict(run_chunks(npu, 20))
    assert set(chunks) == set(sets) and all(sum(c) >= 20 and c[0] == 16 for c in chunks.values())
    if len(sets) == 1:
        assert run_latency(npu, 20) == pytest.approx(sum(per_size[b].latency_s for b in chunks.popitem()[1]))
    path = tmp_path / "npu.pb"
    path.write_bytes(npu.SerializeToString())
    from ratelnn.cli import main
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "compiled batch sizes" in text
    for size in (1, 4, 16):
        assert f"{per_size[size].throughput:,.0f}" in text


def test_tensorflow_single_engine_is_the_old_format(tmp_path):
    from ratelnn.frontend.tensorflow import converter
    ratelnn.tf_init()
    graph_def, ins, outs = _tf_model()
    c = converter(graph_def, {"input_nodes": ins, "output_nodes": outs, "input_shapes": [[1, 8, 8, 3]],
                              "output_dir": str(tmp_path)})
    c.calibrate(np.random.default_rng(1).random((4, 8, 8, 3), dtype=np.float32), progress=False)
    npu = c.to_npu()
    assert all("batch_engines" not in nd.attr for nd in npu.node if nd.op == "RatelEngineOp")


def test_tensorflow_engines_per_size_still_load(tmp_path):
    """A model that stores one engine per size (attr ``batch_engines``, as compiled before
    batch plans) runs with the same bits; a set whose engines disagree, or a corrupt batch
    plan, is a clear error naming the engine node."""
    import tensorflow as tf

    from ratelnn.frontend.tensorflow import converter
    ratelnn.tf_init()
    graph_def, ins, outs = _tf_model()
    c = converter(graph_def, {"input_nodes": ins, "output_nodes": outs, "input_shapes": [[1, 8, 8, 3]],
                              "output_dir": str(tmp_path), "static_batch_sizes": [1, 2]})
    c.calibrate(np.random.default_rng(1).random((4, 8, 8, 3), dtype=np.float32), progress=False)
    npu = c.to_npu()

    def variant(change):
        model = type(npu)()
        model.CopyFrom(npu)
        for node in (nd for nd in model.node if nd.op == "RatelEngineOp"):
            change(node)
        return model, next(nd for nd in model.node if nd.op == "RatelEngineOp")

    def per_size(node):
        first, second = expand_engine_set(decode_engine_set(node.attr["engine"].s))
        node.attr["engine"].s = first.to_bytes()
        node.attr["batch_engines"].list.s.append(second.to_bytes())

    def not_ascending(node):
        per_size(node)
        node.attr["batch_engines"].list.s[0] = node.attr["engine"].s

    def truncated(node):
        per_size(node)
        node.attr["batch_engines"].list.s[0] = node.attr["batch_engines"].list.s[0][:40]

    def bad_plan(node):
        engine = decode_engine_set(node.attr["engine"].s)[0]
        proto = batching.pb.Engine()
        proto.CopyFrom(engine.proto)
        del proto.batch_plans[0].cycles[-1]
        node.attr["engine"].s = seal(proto)

    x = np.random.default_rng(2).random((5, 8, 8, 3), dtype=np.float32)
    old, _ = variant(per_size)
    np.testing.assert_array_equal(run_model("tensorflow", old, {ins[0]: x}, [outs[0]])[0],
                                  run_model("tensorflow", npu, {ins[0]: x}, [outs[0]])[0])
    model, node = variant(not_ascending)
    name = node.attr["engine_name"].s.decode()
    with pytest.raises(RatelError, match="ascending"):
        decode_engine_set(node.attr["engine"].s, list(node.attr["batch_engines"].list.s), name)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{name}.*ascending"):
        run_model("tensorflow", model, {ins[0]: np.zeros((2, 8, 8, 3), np.float32)}, [outs[0]])
    model, node = variant(truncated)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"engine '{name}'") as err:
        run_model("tensorflow", model, {ins[0]: np.zeros((2, 8, 8, 3), np.float32)}, [outs[0]])
    assert "ascending" not in str(err.value)
    model, node = variant(bad_plan)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"engine '{name}'.*batch plan 2: .* cycle estimates"):
        run_model("tensorflow", model, {ins[0]: np.zeros((2, 8, 8, 3), np.float32)}, [outs[0]])


def _mx_model(filters: int, hidden: int):
    """MXNet ``(symbol, arg_params, aux_params)``: 3x3 conv (``filters``) -> relu -> flatten
    -> dense ``hidden`` on 3x8x8 inputs, random weights."""
    from ratelnn.mxnet_compat import import_mxnet
    ratelnn.mx_init()
    mx = import_mxnet()
    x = mx.sym.Convolution(mx.sym.var("data"), kernel=(3, 3), num_filter=filters, pad=(1, 1), name="conv")
    x = mx.sym.Reshape(mx.sym.Activation(x, act_type="relu", name="relu"), shape=(0, -1), name="flat")
    out = mx.sym.FullyConnected(x, num_hidden=hidden, name="out")
    rng = np.random.default_rng(0)
    args = {"conv_weight": rng.standard_normal((filters, 3, 3, 3)), "conv_bias": rng.standard_normal(filters),
            "out_weight": rng.standard_normal((hidden, filters * 64)) * 0.05, "out_bias": rng.standard_normal(hidden)}
    return out, {k: mx.nd.array(v.astype(np.float32)) for k, v in args.items()}, {}


@pytest.mark.no_tf_math
def test_mxnet_dynamic_batch(tmp_path, monkeypatch):
    from ratelnn.frontend.mxnet import converter
    model = _mx_model(4, 6)
    rng = np.random.default_rng(0)
    c = converter(model, {"input_nodes": ["data"], "output_nodes": ["out"], "input_shapes": [[1, 3, 8, 8]],
                          "output_dir": str(tmp_path), "max_dynamic_batch_size": 8})
    c.calibrate(rng.random((8, 3, 8, 8), dtype=np.float32), progress=False)
    npu = c.to_npu()
    compiled = c.handler.import_graph(npu, c.config)
    engine_nodes = [n for n in compiled.nodes if n.op == "Engine"]
    assert engine_nodes
    for n in engine_nodes:
        engines = decode_engine_set(n.attrs["engine"], n.attrs.get("batch_engines", []))
        assert [e.batch_sizes for e in engines] == [[1, 2, 4, 8]]
    _no_compiling(monkeypatch)
    x = rng.random((16, 3, 8, 8), dtype=np.float32)
    _check_batches("mxnet", npu, "data", "out", x)
    # the IR's Python runner splits the same way (native executor): same bits as the MXNet op
    ir_out = run_compiled(compiled, {"data": x[:9]}, backend="native")[compiled.outputs[0]]
    np.testing.assert_array_equal(ir_out, run_model("mxnet", npu, {"data": x[:9]}, ["out"])[0])
    reset_device_time()
    run_model("mxnet", npu, {"data": x[:9]}, ["out"])
    for n in engine_nodes:
        engines = decode_engine_set(n.attrs["engine"], n.attrs.get("batch_engines", []))
        t = device_time(n.attrs["engine_name"])
        assert (t.runs, t.samples) == (1, 9)
        assert t.cycles == pytest.approx(_expected_cycles(engines, 9), rel=1e-9)


@pytest.mark.no_tf_math
def test_joint_placement_stamps_every_engine_of_a_set(tmp_path):
    """compile_jointly writes the scheme's cores into each engine of a set, which stays
    consistent and runs the batch split (IR graphs, reference executor)."""
    from helpers.ir_graphs import build_cnn, compile_config, quantized

    from ratelnn.joint.compile import compile_jointly
    configs = [compile_config(tmp_path, model_name=f"cnn{i}", static_batch_sizes=[1, 4]) for i in range(2)]
    qgraphs = [quantized(build_cnn("NHWC", seed=i), c) for i, c in enumerate(configs)]
    for i, q in enumerate(qgraphs):
        q.name = f"cnn{i}"
    compiled, _, scheme = compile_jointly(qgraphs, configs, {0: 4})
    placed = {a.engine_name: a for a in scheme.engines}
    for graph in compiled:
        for node in (n for n in graph.nodes if n.op == "Engine"):
            engines = decode_engine_set(node.attrs["engine"], node.attrs.get("batch_engines", []),
                                        node.attrs["engine_name"])
            assert [e.batch_sizes for e in engines] == [[1, 4]]
            assert all(list(e.proto.core_ids) == list(placed[node.attrs["engine_name"]].core_ids) for e in engines)
        x = np.random.default_rng(0).standard_normal((5,) + tuple(graph.shape(graph.inputs[0])[1:])).astype(np.float32)
        rows = [run_compiled(graph, {graph.inputs[0]: x[i:i + 1]})[graph.outputs[0]] for i in range(5)]
        np.testing.assert_array_equal(run_compiled(graph, {graph.inputs[0]: x})[graph.outputs[0]], np.concatenate(rows))


def test_tensorflow_batch_sizes_share_the_weights(tmp_path):
    """static_batch_sizes [1, 4, 8]: the serialized GraphDef is at most 1.1x the batch-1 model
    (one copy of the weights), and every sample's output equals the batch-1 model's bits."""
    from ratelnn.frontend.tensorflow import converter
    ratelnn.tf_init()
    graph_def, ins, outs = _tf_model(hidden=64)
    rng = np.random.default_rng(0)
    calib = rng.random((8, 8, 8, 3), dtype=np.float32)
    models = {}
    for label, extra in (("single", {}), ("multi", {"static_batch_sizes": [1, 4, 8]})):
        c = converter(graph_def, {"input_nodes": ins, "output_nodes": outs, "input_shapes": [[1, 8, 8, 3]],
                                  "output_dir": str(tmp_path / label), **extra})
        c.calibrate(calib, progress=False)
        models[label] = c.to_npu()
    sizes = {label: len(m.SerializeToString()) for label, m in models.items()}
    assert sizes["multi"] <= 1.1 * sizes["single"], sizes
    x = rng.random((11, 8, 8, 3), dtype=np.float32)
    single = np.concatenate([run_model("tensorflow", models["single"], {ins[0]: x[i:i + 1]}, [outs[0]])[0]
                             for i in range(len(x))])
    for n in (1, 3, 8, 11):
        np.testing.assert_array_equal(run_model("tensorflow", models["multi"], {ins[0]: x[:n]}, [outs[0]])[0],
                                      single[:n], err_msg=f"batch {n}")


@pytest.mark.no_tf_math
def test_mxnet_batch_sizes_share_the_weights(tmp_path):
    """The same for MXNet: symbol JSON plus params bytes at most 1.1x the batch-1 model."""
    from ratelnn.frontend.mxnet import converter
    from ratelnn.mxnet_compat import import_mxnet
    mx = import_mxnet()
    model = _mx_model(8, 64)
    rng = np.random.default_rng(0)
    calib = rng.random((8, 3, 8, 8), dtype=np.float32)
    sizes, models = {}, {}
    for label, extra in (("single", {}), ("multi", {"static_batch_sizes": [1, 4, 8]})):
        c = converter(model, {"input_nodes": ["data"], "output_nodes": ["out"], "input_shapes": [[1, 3, 8, 8]],
                              "output_dir": str(tmp_path / label), **extra})
        c.calibrate(calib, progress=False)
        sym, arg_params, aux_params = models[label] = c.to_npu()
        params = tmp_path / f"{label}.params"
        mx.nd.save(str(params), {**{f"arg:{k}": v for k, v in arg_params.items()},
                                 **{f"aux:{k}": v for k, v in aux_params.items()}})
        sizes[label] = len(sym.tojson()) + params.stat().st_size
    assert sizes["multi"] <= 1.1 * sizes["single"], sizes
    x = rng.random((5, 3, 8, 8), dtype=np.float32)
    single = np.concatenate([run_model("mxnet", models["single"], {"data": x[i:i + 1]}, ["out"])[0] for i in range(5)])
    np.testing.assert_array_equal(run_model("mxnet", models["multi"], {"data": x}, ["out"])[0], single)


def _conv_engine(cores: int, split_mode: str):
    """One 3x3 convolution, 72x72x64 -> 64 channels, compiled for batches 1, 2, 4 on
    ``cores`` cores: big enough that its cycles grow with the batch."""
    from helpers.engines import requant_consts

    from ratelnn.npu.engine import EngineBuilder
    rng = np.random.default_rng(1)
    b = EngineBuilder("conv", 1)
    tx = b.tensor("x", (1, 72, 72, 64), "int8", 0.02)
    ty = b.tensor("y", (1, 72, 72, 64), "int8", 0.05)
    wq = rng.integers(-127, 128, (3, 3, 64, 64)).astype(np.int8)
    b.add("CONV2D", [tx], [ty], requant_consts(b, wq, "int8", np.full(64, 0.02 * 0.01 / 0.05),
                                               rng.integers(-500, 500, 64)),
          strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=1)
    b.set_io([tx], [ty])
    b.set_placement(0, list(range(cores)), split_mode)
    return batching.with_batch_plans(b.build(), [1, 2, 4])


@pytest.mark.no_tf_math
@pytest.mark.parametrize("cores, split_mode, cheaper", [(1, "SPLIT_NONE", [(2, 0, 2), (1, 2, 1)]),
                                                        (4, "SPLIT_BATCH", [(4, 0, 3)])])
def test_batch_of_three_runs_the_cheaper_split(cores, split_mode, cheaper):
    """A batch of 3 over sizes 1, 2, 4 runs as 2 + 1 or padded to 4, whichever the cost
    model's cycles (estimated again here) predict cheaper: on one core 2 + 1, on four cores
    splitting the batch one padded chunk; both executors give each sample the bits of
    running it alone."""
    from ratelnn.npu.costmodel import layer_cycles
    from ratelnn.npu.costs import instruction_layer_cost
    from ratelnn.npu.device import target_device
    engine = _conv_engine(cores, split_mode)
    core = target_device(0).core
    chunk = {}
    for at in expand_engine_set([engine]):
        total = sum(round(layer_cycles(instruction_layer_cost(at.proto, ins), core, at.batch_size)[0])
                    for ins in at.proto.instructions)
        busiest = at.batch_size if split_mode == "SPLIT_NONE" else -(-at.batch_size // cores)
        chunk[at.batch_size] = total / at.batch_size * busiest
    expected = [(2, 0, 2), (1, 2, 1)] if chunk[2] + chunk[1] < chunk[4] else [(4, 0, 3)]
    assert expected == cheaper
    slots = batch_slots([engine])
    assert plan_batches([s for s, _, _ in slots], 3, [c for _, _, c in slots]) == expected
    x = np.random.default_rng(3).integers(-128, 128, (3, 72, 72, 64)).astype(np.int8)
    alone = np.concatenate([engine.run([x[i:i + 1]], backend="native")[0] for i in range(3)])
    for backend in ("reference", "native"):
        np.testing.assert_array_equal(batching.run_engine_set([engine], [x], backend=backend)[0], alone)
