"""Engine instructions as cost-model layers (``ratelnn.npu.costmodel.LayerCost``).

Used by the compiler to fill each instruction's ``cycles`` and by profiling.  Every number
is per inference (one sample of the batch); bytes are those of the int codes.
"""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..npu.costmodel import CostModelError, LayerCost, Profile, profile_layers
from ..npu.device import target_device
from ..npu.engine import DTYPES, Engine
from ..proto import engine_pb2 as pb

# element operations per output element of the vector-unit instructions
_SOFTMAX_OPS_PER_ELEMENT = 4   # max, table look-up, sum, division


def _sample_shape(t) -> Tuple[int, ...]:
    return tuple(int(d) for d in t.shape[1:])


def _sample_bytes(t) -> float:
    return float(np.prod(_sample_shape(t), dtype=np.int64)) * DTYPES[t.dtype].itemsize


def instruction_layer_cost(engine, instr) -> LayerCost:
    """The :class:`LayerCost` of ``instr`` (an ``Instruction`` of ``engine``, which is an
    :class:`~ratelnn.npu.engine.Engine` or its ``engine_pb2.Engine`` proto).

    Kinds: CONV2D -> ``conv`` (``depthwise`` when every group has one input channel),
    FULLY_CONNECTED -> ``fc``, ADD/SUB/MUL/REQUANT -> ``eltwise``, pools and MEAN -> ``pool``,
    LUT -> ``lut``, SOFTMAX -> ``softmax``, CONCAT -> ``concat``, PAD/RESHAPE/TRANSPOSE ->
    ``move``.  ``bits`` is 16 when an activation operand is 16-bit (else when a constant
    is); CONV2D/FC also give ``weight_bits`` (their weights' width), so an int16 x int8
    product is priced as one (docs/cost-model.md)."""
    proto = getattr(engine, "proto", engine)
    tensors, consts = proto.tensors, proto.constants
    ins = [tensors[i] for i in instr.inputs]
    out = tensors[instr.outputs[0]]
    operands = ins + [consts[c] for c in instr.consts[:1]]
    bits = 16 if any(DTYPES[t.dtype].itemsize == 2 for t in operands) else 8
    if instr.opcode in (pb.CONV2D, pb.FULLY_CONNECTED):
        bits = 16 if any(DTYPES[t.dtype].itemsize == 2 for t in ins) else 8
        weights = DTYPES[consts[instr.consts[0]].dtype].itemsize * 8
    common = dict(weight_bytes=float(sum(len(consts[c].data) for c in instr.consts)),
                  in_bytes=sum(_sample_bytes(t) for t in ins), out_bytes=_sample_bytes(out),
                  bits=bits, name=instr.name)
    out_elems = float(np.prod(_sample_shape(out), dtype=np.int64))
    op = instr.opcode
    if op == pb.CONV2D:
        kh, kw, cg, cout = (int(d) for d in consts[instr.consts[0]].shape)
        oh, ow = _sample_shape(out)[:2]
        groups = max(int(instr.attrs.groups), 1)
        kind = "depthwise" if cg == 1 and groups > 1 else "conv"
        return LayerCost(kind, macs=float(oh * ow * cout * kh * kw * cg), in_channels=cg, out_channels=cout,
                         kernel_area=kh * kw, out_pixels=oh * ow, weight_bits=weights, **common)
    if op == pb.FULLY_CONNECTED:
        k, m = (int(d) for d in consts[instr.consts[0]].shape)
        return LayerCost("fc", macs=float(k * m), in_channels=k, out_channels=m, weight_bits=weights, **common)
    if op in (pb.ADD, pb.SUB, pb.MUL, pb.REQUANT):
        return LayerCost("eltwise", macs=out_elems, **common)
    if op in (pb.MAX_POOL, pb.AVG_POOL):
        kh, kw = instr.attrs.ksize
        return LayerCost("pool", macs=out_elems * kh * kw, kernel_area=int(kh * kw), **common)
    if op == pb.MEAN:
        return LayerCost("pool", macs=float(np.prod(_sample_shape(ins[0]), dtype=np.int64)), **common)
    if op == pb.LUT:
        return LayerCost("lut", macs=out_elems, **common)
    if op == pb.SOFTMAX:
        return LayerCost("softmax", macs=out_elems * _SOFTMAX_OPS_PER_ELEMENT, **common)
    if op == pb.CONCAT:
        return LayerCost("concat", macs=0.0, **common)
    return LayerCost("move", macs=0.0, **common)


def engine_layers(engine: Engine) -> list:
    """The cost-model layers (``LayerCost``, one per instruction, per inference) of ``engine``."""
    return [instruction_layer_cost(engine, ins) for ins in engine.instructions]


def profile_engines(engines: Sequence[Tuple[str, Engine]], batch_size: int = 1,
                    device_info: Optional[Mapping[Any, Any]] = None) -> Profile:
    """Predicted device time of a compiled model's ``(engine name, Engine)`` list, in graph
    order (:func:`ratelnn.profile.profile` reads it from a framework model or an IR graph).

    ``device_info``: the device and cores to run on; default all cores of the first engine's
    device.  Raises ValueError if there is no engine or two share a name."""
    if not engines:
        raise ValueError("the model has no NPU engine (compile it with to_npu first)")
    names: List[str] = [name for name, _ in engines]
    if len(set(names)) != len(engines):
        raise ValueError(f"the model has several engines of one name: {names}")
    empty = [name for name, e in engines if not len(e.instructions)]
    if empty:
        raise CostModelError(f"engines {empty} have no instruction to profile")
    if not device_info:
        device_id = int(engines[0][1].proto.device_id)
        device_info = {device_id: target_device(device_id).num_cores}
    return profile_layers({name: engine_layers(e) for name, e in engines}, batch_size, device_info)
