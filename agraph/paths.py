"""Where AGraph keeps things (docs/agraph.md, "Locations"): ``AGRAPH_HOME`` (default
``~/.agraph``) holds the model store and the trained-weight cache; ``AGRAPH_DATA_DIR``
(default ``$AGRAPH_HOME/data``) the dataset archives; ``AGRAPH_WEIGHTS_DIR`` (default
``$AGRAPH_HOME/weights``) the weights of the models trained here; ``AGRAPH_MODELS_PATH``
(``os.pathsep``-separated folders) more model folders beside the zoo's."""
from __future__ import annotations

import os
from pathlib import Path
from typing import List


def home() -> Path:
    return Path(os.environ.get("AGRAPH_HOME") or Path.home() / ".agraph").expanduser()


def data_dir() -> Path:
    return Path(os.environ.get("AGRAPH_DATA_DIR") or home() / "data").expanduser()


def weights_dir() -> Path:
    return Path(os.environ.get("AGRAPH_WEIGHTS_DIR") or home() / "weights").expanduser()


def store_dir() -> Path:
    return home() / "store"


def user_model_roots() -> List[Path]:
    value = os.environ.get("AGRAPH_MODELS_PATH", "")
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p]
