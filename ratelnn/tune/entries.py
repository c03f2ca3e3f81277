"""The user's ``layer_configs`` entries beside those a search adds (docs/quantization.md
"Automatic defaults"): which layers the user set, by whatever kind of entry, and how entries
naming one layer each are merged over a list that may hold the user's other kinds."""
from __future__ import annotations

import warnings
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Set

from ..ir import Graph
from ..quantization.policy import layer_data_types, whole_model_entry


def user_fixed(graph: Graph, user_layers: Sequence[Mapping[str, Any]]) -> Set[str]:
    """Names of the nodes (and graph inputs) whose data type the user's ``layer_configs``
    entries set, named by ``layer_name`` (one name or a list), ``op_type`` or a named subgraph
    (not the whole-model default, ``whole_model_entry``): the searches leave them as set."""
    chosen = [e for e in user_layers if not whole_model_entry(e)]
    if not chosen:
        return set()
    with warnings.catch_warnings():   # an entry matching nothing is reported when the model is built
        warnings.simplefilter("ignore")
        return set(layer_data_types(graph, {"layer_configs": chosen}))


def merged(layers: Iterable[Mapping[str, Any]], added: Iterable[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """``layers`` then ``added`` (entries naming one layer each), the later of two entries
    naming the same single layer taking the earlier one's place; every other entry (an op
    type, a subgraph, a list of names) kept where it is."""
    out: List[Dict[str, Any]] = []
    at: Dict[str, int] = {}
    for entry in list(layers) + list(added):
        name = entry.get("layer_name")
        if isinstance(name, str) and name in at:
            out[at[name]] = dict(entry)
            continue
        if isinstance(name, str):
            at[name] = len(out)
        out.append(dict(entry))
    return out
