"""AGraph's exceptions (docs/agraph.md).  Each message names the model, file or rule at fault."""
from __future__ import annotations

from ratelnn.datasets import DatasetError as _RatelDatasetError
from ratelnn.errors import RatelError


class AGraphError(RatelError):
    """Base class of AGraph's own errors."""


class RegistryError(AGraphError, KeyError):
    """An unknown model or dataset name, or a model folder that cannot be loaded."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DatasetError(AGraphError, _RatelDatasetError):
    """A dataset archive is missing, has the wrong checksum or the wrong layout; the message
    names the file and the docs/agraph-datasets.md step that makes it."""


class StoreError(AGraphError, RuntimeError):
    """The model store or a store archive is incomplete, tampered with or unreadable."""


class RuleError(AGraphError, ValueError):
    """A model folder breaks an add-model rule (docs/agraph.md, "Adding a model")."""
