"""Helpers for tests, examples and benchmarks: small trained models and GraphDef runners."""
from .fashion_cnn import build_fashion_cnn, cached_fashion_cnn, train_fashion_cnn
from .graph_runner import graph_accuracy, run_graph
from .keras_onnx import KerasONNX, keras_to_onnx

__all__ = ["build_fashion_cnn", "train_fashion_cnn", "cached_fashion_cnn", "run_graph",
           "graph_accuracy", "KerasONNX", "keras_to_onnx"]
