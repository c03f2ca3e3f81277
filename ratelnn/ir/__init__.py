"""Framework-neutral graph IR (see docs/ir.md)."""
from .graph import Graph, GraphError, Node, QParams, TensorInfo

__all__ = ["Graph", "GraphError", "Node", "QParams", "TensorInfo"]
