"""AGraph: the model zoo and high-level flow on top of ratelnn (docs/agraph.md).

``agraph.load(name)`` (FP32), ``agraph.quantize(name)``, ``agraph.compile(name)``,
``agraph.get(name, stage)`` (from the store, built on first use), ``agraph.evaluate(name,
stage)`` -> :class:`ModelMetrics`, ``agraph.eval_model(graph, name)``, ``agraph.list_models()``.
``agraph`` imports ``ratelnn``; ``ratelnn`` never imports ``agraph``.
"""
from .errors import AGraphError, DatasetError, RegistryError, RuleError, StoreError
from .flow import Model, compile, eval_model, evaluate, get, load, quantize
from .metrics import ModelMetrics
from .registry import list_models
from .store import Store

__all__ = ["load", "quantize", "compile", "evaluate", "eval_model", "get", "list_models", "ModelMetrics",
           "Model", "Store", "AGraphError", "DatasetError", "RegistryError", "RuleError", "StoreError"]
