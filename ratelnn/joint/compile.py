"""Joint compilation of several converters' models (docs/architecture.md §8).

Each model is compiled on its own (``ratelnn.compiler.compile_graph``); the engines'
instructions become the cost model's layers (``instruction_layer_cost``), :func:`plan`
chooses the execution scheme, and the placement it chose (device, cores, split mode) is
written back into every engine before the graphs are exported.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..compiler import compile_graph
from ..npu.costs import instruction_layer_cost
from ..ir import Graph, Node
from ..npu.engine import SPLIT_MODES, Engine, seal
from .scheme import Scheme
from .planning import plan
from .search import ModelSpec

# scheme split modes -> engine format split modes
ENGINE_SPLIT_MODE = {"none": "SPLIT_NONE", "batch": "SPLIT_BATCH",
                     "tensor": "SPLIT_OUTPUT_CHANNELS", "pipeline": "SPLIT_PIPELINE"}


def distinct_model_names(configs: Sequence[Mapping[str, Any]]) -> List[str]:
    """One distinct model name per config, in order (docs/joint.md, "Model names").

    An explicit ``model_name`` is kept as given (made identifier-safe); two models with the
    same explicit name are an error (:class:`~ratelnn.config.ConfigError`).  Every other model
    is named after its first output node (``Identity`` -> ``identity``); a derived name that is
    taken (by an explicit name or an earlier model) gets the first free suffix ``_1``, ``_2``,
    ... (``identity``, ``identity_1``, ...).  Deterministic: the same configs in the same order
    give the same names."""
    from ..config import ConfigError
    from ..convert import model_name
    explicit: Dict[str, int] = {}
    for i, config in enumerate(configs):
        if config.get("model_name"):
            name = model_name(config)
            if name in explicit:
                raise ConfigError(
                    f"models {explicit[name]} and {i} both set model_name {name!r}: explicit model names "
                    "must be distinct (they name the engines, output files and scheme entries); "
                    "change one, or leave it unset to get a name derived from the output node")
            explicit[name] = i
    taken = set(explicit)
    names = []
    for config in configs:
        name = model_name(config)
        if not config.get("model_name"):
            base, k = name, 0
            while name in taken:
                k += 1
                name = f"{base}_{k}"
            taken.add(name)
        names.append(name)
    return names


def engine_nodes(graph: Graph) -> List[Node]:
    return [n for n in graph.nodes if n.op == "Engine"]


def model_spec(name: str, graph: Graph, config: Mapping[str, Any]) -> ModelSpec:
    """The cost model's view of one compiled graph: one LayerCost per engine instruction."""
    layers, names, counts = [], [], []
    for node in engine_nodes(graph):
        engine = Engine.from_bytes(node.attrs["engine"], label=node.attrs["engine_name"])
        costs = [instruction_layer_cost(engine, instr) for instr in engine.instructions]
        layers.extend(costs)
        names.append(node.attrs["engine_name"])
        counts.append(len(costs))
    invocations = int(config.get("invocations_per_frame", 1))
    if invocations < 1:
        raise ValueError(f"model {name!r}: invocations_per_frame must be >= 1, got {invocations}")
    return ModelSpec(name, layers, invocations_per_frame=invocations, engine_names=names,
                     engine_layer_counts=counts)


def stamp_placement(graph: Graph, scheme: Scheme, model_index: int) -> None:
    """Write the scheme's device, cores and split mode into the engines of one model."""
    by_name = {a.engine_name: a for a in scheme.engines if a.model_index == model_index}
    for node in engine_nodes(graph):
        a = by_name.get(node.attrs["engine_name"])
        if a is None:
            raise ValueError(f"the scheme places no engine named {node.attrs['engine_name']!r}")
        stamped = []
        for data in [node.attrs["engine"], *node.attrs.get("batch_engines", [])]:   # the engine set
            proto = Engine.from_bytes(data, label=node.attrs["engine_name"]).proto
            proto.device_id = int(a.device_id)
            del proto.core_ids[:]
            proto.core_ids.extend(int(c) for c in a.core_ids)
            proto.split_mode = SPLIT_MODES[ENGINE_SPLIT_MODE[a.split_mode]]
            stamped.append(seal(proto))
        node.attrs.update(engine=stamped[0], device_id=int(a.device_id), core_ids=[int(c) for c in a.core_ids])
        if len(stamped) > 1:
            node.attrs["batch_engines"] = stamped[1:]


def compile_models(jobs: Sequence[Tuple[Graph, Mapping[str, Any], Optional[Mapping]]]) -> List[Graph]:
    """``compile_graph`` of each ``(quantized graph, config, device_info)`` job, in order
    (a block of :meth:`ratelnn.distributed.RayExecutor.map_blocks`)."""
    return [compile_graph(qgraph, config, device_info) for qgraph, config, device_info in jobs]


def compile_jointly(qgraphs: Sequence[Graph], configs: Sequence[Mapping[str, Any]],
                    device_info: Optional[Mapping] = None,
                    executor: Any = None) -> Tuple[List[Graph], List[ModelSpec], Scheme]:
    """Compile each quantized graph, plan the scheme, stamp the placement.

    ``executor`` (e.g. a ``ratelnn.distributed.RayExecutor``): compile the models in
    parallel on its workers, one model per task; compiling is deterministic, so the result
    is the same.  Returns the compiled IR graphs (in input order), the model specs and the
    scheme."""
    names = [g.name for g in qgraphs]
    if len(set(names)) != len(names):
        raise ValueError(f"model names must be distinct (set config 'model_name'), got {names}")
    jobs = [(qgraph, config, device_info) for qgraph, config in zip(qgraphs, configs)]
    if executor is None:
        compiled = compile_models(jobs)   # engines: <model>_engine_<k>
    else:
        compiled = [g for block in executor.map_blocks(compile_models, jobs, total=len(jobs),
                                                       label="compile models", block_size=1)
                    for g in block]
    specs = [model_spec(name, graph, config) for name, graph, config in zip(names, compiled, configs)]
    scheme = plan(specs, device_info)
    for i, graph in enumerate(compiled):
        stamp_placement(graph, scheme, i)
    return compiled, specs, scheme


def engine_placements(graph: Graph) -> Dict[str, Tuple[int, List[int]]]:
    """engine name -> (device id, core ids) of a compiled graph (for inspection and tests)."""
    return {n.attrs["engine_name"]: (n.attrs["device_id"], list(n.attrs["core_ids"]))
            for n in engine_nodes(graph)}
