"""The model-handler contract a frontend implements, under the frontend package's name:
:class:`ratelnn.model_handler.ModelHandler` (it lives beside the converters that call it)."""
from ..model_handler import ModelHandler, checked_float_ir

__all__ = ["ModelHandler", "checked_float_ir"]
