"""TensorFlow frontend: frozen GraphDef <-> IR, converters and freeze helpers
(docs/architecture.md §2, docs/tensorflow.md)."""
from __future__ import annotations

from ..entry_points import converters
from .exporter import export_graphdef, recorded_meta
from .freeze import freeze_keras, freeze_saved_model
from .handler import TFModelHandler
from .importer import import_graphdef
from . import model_io


converter, joint_converter = converters(TFModelHandler, "frozen GraphDef")


__all__ = ["converter", "joint_converter", "freeze_keras", "freeze_saved_model", "TFModelHandler",
           "import_graphdef", "export_graphdef", "model_io", "recorded_meta"]
