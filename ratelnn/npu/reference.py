"""The numpy reference executor: the readable definition of the engine integer semantics
(docs/npu-arithmetic.md).  The native executor (ops/core/npu_exec.cc) gives the same bits.

All arithmetic is int64; the validator guarantees that no intermediate exceeds 2**62.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..proto import engine_pb2 as pb
from .format import qrange


# ------------------------------------------------------------------ integer primitives
def rdiv(n: np.ndarray, d) -> np.ndarray:
    """``n / d`` rounded half away from zero (``d > 0``), exactly, in int64."""
    n = np.asarray(n, dtype=np.int64)
    d = np.asarray(d, dtype=np.int64)
    q, r = np.divmod(np.abs(n), d)
    q = q + (2 * r >= d)
    return np.where(n < 0, -q, q)


def round_shift(p: np.ndarray, s) -> np.ndarray:
    """``p / 2**s`` rounded half away from zero (== ``rdiv(p, 2**s)``)."""
    return rdiv(p, np.left_shift(np.int64(1), np.asarray(s, dtype=np.int64)))


def _clamp_bounds(ins, out_dtype) -> tuple:
    lo, hi = qrange(out_dtype)
    a = ins.attrs
    return (a.act_min if a.HasField("act_min") else lo, a.act_max if a.HasField("act_max") else hi)


def _finish(v: np.ndarray, ins, out_dtype) -> np.ndarray:
    lo, hi = _clamp_bounds(ins, out_dtype)
    return np.clip(v, lo, hi).astype(out_dtype)


# ------------------------------------------------------------------ instructions
def conv2d(x, w, bias, mult, shift, neg_mult, neg_shift, strides, dilations, pads, groups) -> np.ndarray:
    """Grouped NHWC convolution, HWIO weights; returns the requantized int64 result
    (before the clamp).  Accumulator: ``sum x*w + bias`` exact in int64."""
    n, h, w_in, cin = x.shape
    kh, kw, cg, cout = w.shape
    (sh, sw), (dh, dw), (top, bottom, left, right) = strides, dilations, pads
    oh = (h + top + bottom - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w_in + left + right - (dw * (kw - 1) + 1)) // sw + 1
    xp = np.pad(x.astype(np.int64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    acc = np.zeros((groups, n * oh * ow, cout // groups), dtype=np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw, :]
            patch = patch.reshape(n * oh * ow, groups, cg).transpose(1, 0, 2)          # [g, P, cg]
            wij = w[i, j].astype(np.int64).reshape(cg, groups, cout // groups).transpose(1, 0, 2)  # [g, cg, co]
            acc += np.matmul(patch, wij)
    total = acc.transpose(1, 0, 2).reshape(n, oh, ow, cout) + bias.astype(np.int64)
    return _channel_requant(total, mult, shift, neg_mult, neg_shift)


def _channel_requant(total, mult, shift, neg_mult, neg_shift) -> np.ndarray:
    pos = round_shift(total * mult.astype(np.int64), shift)
    neg = round_shift(total * neg_mult.astype(np.int64), neg_shift)
    return np.where(total >= 0, pos, neg)


def _requant_consts(consts: List[np.ndarray]):
    """(bias, M, s, M_neg, s_neg) of CONV2D / FULLY_CONNECTED (negatives default to M, s)."""
    bias, mult, shift = consts[1], consts[2], consts[3]
    neg_mult, neg_shift = (consts[4], consts[5]) if len(consts) == 6 else (mult, shift)
    return bias, mult, shift, neg_mult, neg_shift


def _windows(xp: np.ndarray, kh: int, kw: int, sh: int, sw: int, oh: int, ow: int):
    for i in range(kh):
        for j in range(kw):
            yield xp[:, i: i + sh * (oh - 1) + 1: sh, j: j + sw * (ow - 1) + 1: sw, :]


def pool(x, ins, out_shape) -> np.ndarray:
    """MAX_POOL / AVG_POOL (NHWC); returns int64 before the clamp."""
    a = ins.attrs
    (kh, kw), (sh, sw), (top, bottom, left, right) = a.ksize, a.strides, a.pads
    oh, ow = out_shape[1], out_shape[2]
    pads = ((0, 0), (top, bottom), (left, right), (0, 0))
    x = x.astype(np.int64)
    if ins.opcode == pb.MAX_POOL:
        xp = np.pad(x, pads, constant_values=np.iinfo(np.int64).min)
        return np.maximum.reduce(list(_windows(xp, kh, kw, sh, sw, oh, ow)))
    total = sum(_windows(np.pad(x, pads), kh, kw, sh, sw, oh, ow))
    if a.count_include_pad:
        cnt = np.int64(kh * kw)
    else:
        ones = np.pad(np.ones((1,) + x.shape[1:3] + (1,), dtype=np.int64), pads)
        cnt = sum(_windows(ones, kh, kw, sh, sw, oh, ow))
    return rdiv(total * a.multipliers[0], cnt << a.shifts[0])


def softmax(x, table, mult, shift) -> np.ndarray:
    """Integer softmax along the last axis; int64 before the clamp."""
    x = x.astype(np.int64)
    e = table.astype(np.int64)[x.max(axis=-1, keepdims=True) - x]
    total = e.sum(axis=-1, keepdims=True)
    return rdiv(e * mult, total << shift)


def _execute(ins, engine: "Engine", vals: Dict[int, np.ndarray]) -> np.ndarray:
    a = ins.attrs
    consts = [engine.constants[c] for c in ins.consts]
    xs = [vals[t] for t in ins.inputs]
    out = engine.tensors[ins.outputs[0]]
    out_dtype = out.dtype
    op = ins.opcode
    batch = xs[0].shape[0]
    out_shape = (batch,) + out.shape[1:]
    if op == pb.CONV2D:
        v = conv2d(xs[0], consts[0], *_requant_consts(consts), a.strides, a.dilations, a.pads, a.groups)
    elif op == pb.FULLY_CONNECTED:
        x4 = xs[0].reshape(batch, 1, 1, -1)
        w4 = consts[0].reshape((1, 1) + consts[0].shape)
        v = conv2d(x4, w4, *_requant_consts(consts), (1, 1), (1, 1), (0, 0, 0, 0), 1).reshape(out_shape)
    elif op in (pb.ADD, pb.SUB, pb.MUL):
        p, q = [o.astype(np.int64) for o in xs + consts]
        if op == pb.MUL:
            acc = p * q * a.multipliers[0]
        elif op == pb.ADD:
            acc = p * a.multipliers[0] + q * a.multipliers[1]
        else:
            acc = p * a.multipliers[0] - q * a.multipliers[1]
        v = np.broadcast_to(round_shift(acc, a.shifts[0]), out_shape)
    elif op in (pb.MAX_POOL, pb.AVG_POOL):
        v = pool(xs[0], ins, out_shape)
    elif op == pb.MEAN:
        axes = tuple(a.axes)
        total = xs[0].astype(np.int64).sum(axis=axes, keepdims=True)
        cells = int(np.prod([xs[0].shape[ax] for ax in axes]))
        v = rdiv(total * a.multipliers[0], np.int64(cells) << a.shifts[0]).reshape(out_shape)
    elif op == pb.CONCAT:
        parts = [round_shift(x.astype(np.int64) * m, s) for x, m, s in zip(xs, a.multipliers, a.shifts)]
        v = np.concatenate(parts, axis=a.axis)
    elif op == pb.REQUANT:
        v = round_shift(xs[0].astype(np.int64) * a.multipliers[0], a.shifts[0])
    elif op == pb.PAD:
        pads = np.asarray(a.pads).reshape(-1, 2)
        return np.pad(xs[0], [tuple(p) for p in pads], constant_values=a.pad_value)
    elif op == pb.RESHAPE:
        return xs[0].reshape(out_shape)
    elif op == pb.TRANSPOSE:
        return np.ascontiguousarray(np.transpose(xs[0], tuple(a.perm)))
    elif op == pb.LUT:
        lo, _ = qrange(xs[0].dtype)
        return consts[0][xs[0].astype(np.int64) - lo]
    elif op == pb.SOFTMAX:
        v = softmax(xs[0], consts[0], a.multipliers[0], a.shifts[0])
    else:
        raise AssertionError(f"opcode {op} passed validation but has no reference semantics")
    return _finish(v, ins, out_dtype)


def execute_instruction(engine: "Engine", ins, values: Dict[int, np.ndarray]) -> np.ndarray:
    """The output codes of instruction ``ins`` of ``engine`` with input codes ``values``
    (tensor id -> array): one step of :func:`run_reference`."""
    return _execute(ins, engine, values)


def run_reference(engine: "Engine", inputs: Sequence[np.ndarray],
                  capture: Optional[Callable[[Any, np.ndarray], None]] = None) -> List[np.ndarray]:
    """Run a validated ``engine`` on inputs already checked by ``Engine.check_inputs``.

    ``capture(instruction, codes)``, if given, is called after every instruction with its
    output codes (``engine.tensors[instruction.outputs[0]]`` names the tensor and its scale)."""
    vals: Dict[int, np.ndarray] = dict(zip(engine.proto.inputs, inputs))
    for ins in engine.instructions:
        vals[ins.outputs[0]] = _execute(ins, engine, vals)
        if capture is not None:
            capture(ins, vals[ins.outputs[0]])
    return [np.ascontiguousarray(vals[t]).copy() for t in engine.proto.outputs]
