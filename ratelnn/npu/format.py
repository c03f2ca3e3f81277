"""The engine format's constants and checks shared by the engine model (engine.py) and both
executors (native.py, reference.py): format version, arithmetic bounds, dtype and opcode
codes of ratelnn/proto/engine.proto, the checksum (:func:`seal`), the default size limits
and :class:`EngineError`."""
from __future__ import annotations

import struct
import zlib
from typing import Dict, Tuple

import numpy as np

from ..errors import RatelError
from ..proto import engine_pb2 as pb

FORMAT_MAJOR = 1
FORMAT_MINOR = 2       # 1.1: the checksum field (Engine.checksum, written last); 1.2: batch_plans
MAX_PRODUCT = 1 << 62   # |accumulator * multiplier| bound every engine must respect
MAX_MULTIPLIER = (1 << 31) - 1
MAX_SHIFT = 62

# Size limits (docs/reliability.md, "Engines"): elements of one activation tensor and bytes of
# all activation tensors at a batch; the defaults of ops/core/npu_engine.h kMaxElements and
# kMaxActivationBytes, and of the config keys max_tensor_elements / max_total_bytes.
MAX_TENSOR_ELEMENTS = (1 << 31) - 1
MAX_TOTAL_BYTES = 1 << 33

CHECKSUM_TAG = (pb.Engine.DESCRIPTOR.fields_by_name["checksum"].number << 3) | 5  # fixed32

DTYPES: Dict[int, np.dtype] = {pb.INT8: np.dtype("int8"), pb.UINT8: np.dtype("uint8"),
                               pb.INT16: np.dtype("int16"), pb.INT32: np.dtype("int32")}
DTYPE_CODES: Dict[np.dtype, int] = {v: k for k, v in DTYPES.items()}
ACTIVATION_DTYPES = ("int8", "uint8", "int16")

OPCODES = {name: pb.Opcode.Value(name) for name in pb.Opcode.keys() if name != "OPCODE_UNSPECIFIED"}
SPLIT_MODES = {name: pb.SplitMode.Value(name) for name in pb.SplitMode.keys()}


class EngineError(RatelError, ValueError):
    """Engine bytes are malformed or inconsistent, or run-time inputs do not fit the engine.
    The message names the engine."""


def seal(proto: "pb.Engine") -> bytes:
    """The engine bytes of ``proto`` with their checksum: the serialization without the
    checksum field, then the field (tag, CRC-32 of what precedes it, little-endian) last, as
    ops/core/npu_checksum.h reads it.  Deterministic: the same proto gives the same bytes."""
    proto.ClearField("checksum")
    body = proto.SerializeToString(deterministic=True)
    return body + struct.pack("<BI", CHECKSUM_TAG, zlib.crc32(body))


def qrange(dtype) -> Tuple[int, int]:
    """(min, max) code of an integer dtype."""
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def qabs(dtype) -> int:
    """Largest |code| of an integer dtype: 128 (int8), 255 (uint8), 32768 (int16)."""
    lo, hi = qrange(dtype)
    return max(-lo, hi)
