"""What an exported model records of its build: the IR ``meta`` entries that travel with the
framework model (docs/quantization.md "Automatic defaults"), each as JSON text under the name
``ratelnn.<key>``.  The frontends write them where their format keeps metadata (TensorFlow: a
string ``Const`` node, ONNX: ``metadata_props``, MXNet: an attribute of the first input
variable) and read them back with ``recorded_meta(model)``."""
from __future__ import annotations

import json
from typing import Any, Dict, Iterable, Mapping, Tuple

RECORDED_KEYS = ("accuracy_auto",)   # IR meta keys an exported model keeps
PREFIX = "ratelnn."


def recorded_texts(meta: Mapping[str, Any]) -> Dict[str, str]:
    """``ratelnn.<key>`` -> JSON text of every :data:`RECORDED_KEYS` entry of ``meta``."""
    return {PREFIX + k: json.dumps(meta[k], sort_keys=True) for k in RECORDED_KEYS if k in meta}


def decoded(pairs: Iterable[Tuple[str, str]]) -> Dict[str, Any]:
    """``key`` -> value of the ``(name, JSON text)`` pairs named ``ratelnn.<key>`` for a
    recorded key; other names are ignored."""
    return {name[len(PREFIX):]: json.loads(text) for name, text in pairs
            if name.startswith(PREFIX) and name[len(PREFIX):] in RECORDED_KEYS}
