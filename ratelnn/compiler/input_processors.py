"""Input processors compiled into the model (docs/architecture.md §6, "Input processors").

Under ``src_dtype: uint8`` a graph input of the compiled model takes the raw 8-bit image in
``src_format`` (RGB, BGR, GRAY, YUV420SP = NV12, YUV420SP_VU = NV21) and ``src_layout``
(NHWC, NCHW); the colour conversion, the layout change and ``(x - mean) / std`` become IR
nodes in front of the model, quantized exactly so that the compiler puts them into the first
engine, in existing integer instructions:

- the per-channel affine map ``v_c = sum_k A[c, k] x_k + b[c]`` from the source pixel
  ``x`` (B, G, R codes; Y, U, V; the gray code) to the normalised model input ``v`` (colour
  matrix, channel order and normalisation folded together; no intermediate rounding or
  clipping of RGB) is one 1x1 ``Conv2D`` with int16 weights ``round(A[c, k] * K_c)``
  (``K_c = 32767 / max_k |A[c, k]|``), int32 bias ``round(b[c] * K_c)``, requantized to the
  model input's codes: ``CONV2D`` of docs/npu-arithmetic.md defines every bit;
- YUV420SP: the Y plane and the interleaved chroma plane are selected from the
  ``[N, 3H/2, W, 1]`` input by two ``Conv2D`` with a two-tap column kernel (``[1, 0]`` or
  ``[0, 1]``, row dilation ``H/2`` or ``H``), the chroma is repeated 2x2 (nearest) by
  ``Concat`` of a tensor with itself and ``Reshape``, and ``Concat`` joins Y, U, V;
- a layout change is a ``Transpose``.

All the intermediate tensors are uint8 codes at scale 1 (the pixel values themselves).  The
graph input keeps its name; the tensor the model read before is renamed ``<input>/normalized``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, List, Mapping, Tuple

import numpy as np

from ..config import ConfigError
from ..ir import Graph, Node, QParams, TensorInfo
from ..ir.arith import ROUNDERS

YUV_FORMATS = ("YUV420SP", "YUV420SP_VU")
DEFAULT_CSC_MODE = "FullRange_BT601"
# (Kr, Kb) luma weights of the colour standards (ITU-R BT.601, BT.709)
LUMA_WEIGHTS = {"BT601": (0.299, 0.114), "BT709": (0.2126, 0.0722)}
WEIGHT_CODE_MAX = 32767          # int16 weights of the normalising convolution
PIXEL = QParams("uint8", 1.0)    # raw pixel codes and the planes made from them


@dataclasses.dataclass(frozen=True)
class InputProcessor:
    """How graph input ``tensor`` is fed: ``raw_shape`` uint8 codes in ``src_format`` /
    ``src_layout``; ``matrix`` ``[Ct, Cs]`` and ``offset`` ``[Ct]`` (float64) map a source
    pixel (channels as stored; Y, U, V for YUV) to the model's normalised input channels,
    which the model takes in ``tensor_layout`` with ``shape``."""

    tensor: str
    src_format: str
    src_layout: str
    tensor_layout: str
    shape: Tuple[int, ...]
    raw_shape: Tuple[int, ...]
    matrix: np.ndarray
    offset: np.ndarray


def csc_matrix(mode: str) -> np.ndarray:
    """The ``[3, 4]`` YUV -> RGB matrix of ``csc_mode`` (rows R, G, B; columns Y, U, V, offset;
    pixel units 0..255): full range takes Y, U, V as they are, limited range Y in 16..235 and
    U, V in 16..240."""
    kr, kb = LUMA_WEIGHTS[mode.split("_")[1]]
    kg = 1.0 - kr - kb
    ys, cs, y0 = (255.0 / 219.0, 255.0 / 224.0, 16.0) if mode.startswith("Limited") else (1.0, 1.0, 0.0)
    rgb_of_yuv = np.array([[ys, 0.0, 2 * (1 - kr) * cs],
                           [ys, -2 * kb * (1 - kb) / kg * cs, -2 * kr * (1 - kr) / kg * cs],
                           [ys, 2 * (1 - kb) * cs, 0.0]])
    offset = -rgb_of_yuv @ np.array([y0, 128.0, 128.0])
    return np.concatenate([rgb_of_yuv, offset[:, None]], axis=1)


def _source_to_rgb(src_format: str, setting: Mapping[str, Any], where: str) -> Tuple[np.ndarray, np.ndarray]:
    """``(A [3, Cs], b [3])``: RGB of a source pixel."""
    if src_format == "RGB":
        return np.eye(3), np.zeros(3)
    if src_format == "BGR":
        return np.eye(3)[::-1], np.zeros(3)
    if src_format == "GRAY":
        return np.ones((3, 1)), np.zeros(3)
    mat = setting.get("csc_mat")
    if mat is not None and setting.get("csc_mode") is not None:
        raise ConfigError(f"{where}: give csc_mode or csc_mat, not both")
    full = (np.asarray(mat, np.float64).reshape(3, 4) if mat is not None
            else csc_matrix(setting.get("csc_mode") or DEFAULT_CSC_MODE))
    a, b = full[:, :3], full[:, 3]
    if src_format == "YUV420SP_VU":          # the chroma plane holds V, U pairs
        a = a[:, [0, 2, 1]]
    return a, b


def _rgb_to_model(order: str, channels: int) -> np.ndarray:
    """``[Ct, 3]``: the model's channels from RGB (gray: BT.601 luma)."""
    if channels == 1:
        return np.array([[0.299, 0.587, 0.114]])
    return np.eye(3)[::-1] if order == "BGR" else np.eye(3)


def _per_channel(key: str, value: Any, default: float, channels: int, where: str) -> np.ndarray:
    arr = np.asarray(default if value is None else value, np.float64).reshape(-1)
    if arr.size not in (1, channels):
        raise ConfigError(f"{where}: {key} has {arr.size} values for {channels} channels")
    return np.broadcast_to(arr, (channels,)).copy()


def _for_input(config: Mapping[str, Any], name: str) -> dict:
    from ..calibration.data import for_input
    return for_input(config, name)


def input_processors(graph: Graph, config: Mapping[str, Any], framework: str = "") -> List[InputProcessor]:
    """The processors of the graph inputs whose ``src_dtype`` is ``uint8`` (none otherwise).
    ``framework`` gives the default layout (NCHW for mxnet and onnx) when ``data_format``
    is not set."""
    out = []
    for name in graph.inputs:
        setting = _for_input(config, name)
        if setting.get("src_dtype") != "uint8":
            continue
        where = f"input {name!r} (src_dtype uint8)"
        shape = tuple(graph.shape(name))
        layout = setting.get("data_format") or ("NCHW" if framework in ("mxnet", "onnx") else "NHWC")
        if len(shape) != 4 or any(d is None for d in shape[1:]):
            raise ConfigError(f"{where}: the compiled model can take a raw image only for an input of "
                              f"static shape [N, H, W, C] or [N, C, H, W], got {list(shape)}")
        h, w, c = (shape[2], shape[3], shape[1]) if layout == "NCHW" else shape[1:]
        if c not in (1, 3):
            raise ConfigError(f"{where}: data_format {layout} gives {c} channels for shape {list(shape)}; "
                              "a raw image input needs 1 or 3 (is data_format right?)")
        src_format = setting.get("src_format") or ("GRAY" if c == 1 else setting.get("channel_order") or "RGB")
        src_layout = setting.get("src_layout") or layout
        to_rgb, rgb_offset = _source_to_rgb(src_format, setting, where)
        model = _rgb_to_model(setting.get("channel_order") or "RGB", c)
        if src_format == "GRAY" and c == 1:
            model, to_rgb, rgb_offset = np.ones((1, 1)), np.ones((1, 1)), np.zeros(1)
        mean = _per_channel("mean", setting.get("mean"), 0.0, c, where)
        std = _per_channel("std", setting.get("std"), 1.0, c, where)
        if np.any(std == 0):
            raise ConfigError(f"{where}: std must not be 0, got {setting.get('std')!r}")
        matrix = (model @ to_rgb) / std[:, None]
        offset = (model @ rgb_offset - mean) / std
        if src_format in YUV_FORMATS:
            if h % 2 or w % 2:
                raise ConfigError(f"{where}: src_format {src_format} needs an even height and width, "
                                  f"got {h}x{w}")
            rows = (shape[0], h * 3 // 2, w, 1)
            raw = rows if src_layout == "NHWC" else (shape[0], 1, h * 3 // 2, w)
        else:
            cs = to_rgb.shape[1]
            raw = (shape[0], h, w, cs) if src_layout == "NHWC" else (shape[0], cs, h, w)
        out.append(InputProcessor(name, src_format, src_layout, layout, shape, raw, matrix, offset))
    return out


# ------------------------------------------------------------------ IR nodes
class _Builder:
    """Appends the nodes of one input's processor to ``graph``."""

    def __init__(self, graph: Graph, proc: InputProcessor) -> None:
        self.g, self.p = graph, proc
        self.prefix = f"{proc.tensor}/input_processor"

    def tensor(self, label: str, shape, qp: QParams = PIXEL) -> str:
        name = f"{self.prefix}/{label}"
        self.g.tensors[name] = TensorInfo(tuple(shape), "float32")
        self.g.qparams[name] = qp
        return name

    def node(self, label: str, op: str, inputs: List[str], out: str, **attrs) -> str:
        self.g.add_node(Node(f"{self.prefix}/{label}", op, inputs, [out], attrs))
        return out

    def param(self, label: str, value: np.ndarray, qp: QParams) -> str:
        name = f"{self.prefix}/{label}"
        self.g.params[name] = value
        self.g.tensors[name] = TensorInfo(value.shape, str(value.dtype))
        self.g.qparams[name] = qp
        return name

    def conv(self, label: str, x: str, w: np.ndarray, scales: np.ndarray, bias: np.ndarray, out: str,
             layout: str = "NHWC", dilations=(1, 1)) -> str:
        """``Conv2D`` with integer weights ``w`` (HWIO) at per-channel ``scales`` and int32 ``bias``
        at the same scales (input scale 1)."""
        cout = w.shape[-1]
        wq = self.param(f"{label}/weights", w, QParams(str(w.dtype), scales, 3))
        bq = self.param(f"{label}/bias", bias.astype(np.int32), QParams("int32", scales, 0))
        assert bias.shape == (cout,)
        return self.node(label, "Conv2D", [x, wq, bq], out, layout=layout, strides=(1, 1), dilations=dilations,
                         pads=(0, 0, 0, 0), groups=1, act="none")

    def rows(self, label: str, x: str, first: int, count: int, dilation: int) -> str:
        """Rows ``first`` (0 or ``dilation``) .. ``first + count`` of NHWC ``x`` (one channel):
        a two-tap column kernel ``[1, 0]`` or ``[0, 1]`` with row dilation ``dilation``."""
        n, _, w, _ = self.g.shape(x)
        taps = np.array([1, 0] if first == 0 else [0, 1], np.int8).reshape(2, 1, 1, 1)
        out = self.tensor(label, (n, count, w, 1))
        return self.conv(label, x, taps, np.ones(1), np.zeros(1, np.int32), out, dilations=(dilation, 1))

    def reshape(self, label: str, x: str, shape) -> str:
        out = self.tensor(label, (self.g.shape(x)[0],) + tuple(shape))
        return self.node(label, "Reshape", [x], out, shape=[-1] + list(shape))

    def concat(self, label: str, xs: List[str], axis: int) -> str:
        shapes = [self.g.shape(x) for x in xs]
        shape = list(shapes[0])
        shape[axis] = sum(s[axis] for s in shapes)
        return self.node(label, "Concat", xs, self.tensor(label, shape), axis=axis)

    def yuv444(self, raw: str) -> str:
        """NHWC ``[N, H, W, 3]`` (Y, then the chroma plane's two bytes) of the YUV420SP input."""
        n, h, w, _ = ((self.p.shape[0],) + self.p.shape[2:] + (self.p.shape[1],) if self.p.tensor_layout == "NCHW"
                      else self.p.shape)
        nv = raw if self.p.src_layout == "NHWC" else self.reshape("nv_rows", raw, (h * 3 // 2, w, 1))
        y = self.rows("y_plane", nv, 0, h, h // 2)
        uv = self.reshape("uv_pairs", self.rows("uv_plane", nv, h, h // 2, h), (h // 2, w // 2, 1, 2))
        uv = self.reshape("uv_wide", self.concat("uv_repeat_w", [uv, uv], 3), (h // 2, 1, w, 2))
        uv = self.reshape("uv_full", self.concat("uv_repeat_h", [uv, uv], 2), (h, w, 2))
        return self.concat("yuv", [y, uv], 3)

    def normalize(self, x: str, layout: str, out: str) -> str:
        """The 1x1 ``Conv2D`` of the affine map (module docstring) into ``out``."""
        a, b = self.p.matrix, self.p.offset
        peak = np.abs(a).max(axis=1)
        k = np.where(peak > 0, WEIGHT_CODE_MAX / np.where(peak > 0, peak, 1.0), 1.0)
        w = ROUNDERS["half_away_from_zero"](a * k[:, None]).astype(np.int16).T.reshape(1, 1, a.shape[1], a.shape[0])
        bias = ROUNDERS["half_away_from_zero"](b * k)
        if np.any(np.abs(bias) > np.iinfo(np.int32).max):
            raise ConfigError(f"input {self.p.tensor!r}: mean / std give an offset too large for the int32 bias "
                              f"of the normalising convolution ({b.tolist()})")
        return self.conv("normalize", x, w, 1.0 / k, bias.astype(np.int32), out, layout=layout)


def _value_range_qparams(proc: InputProcessor) -> QParams:
    """int16 QParams covering every value the processor can produce (an input no quantized
    op reads has none of its own)."""
    lo = proc.offset + np.minimum(proc.matrix, 0).sum(axis=1) * 255
    hi = proc.offset + np.maximum(proc.matrix, 0).sum(axis=1) * 255
    peak = float(max(np.abs(lo).max(), np.abs(hi).max(), 1e-6))
    return QParams("int16", peak / 32767)


def attach(graph: Graph, processors: List[InputProcessor]) -> List[str]:
    """Put each processor's nodes in front of ``graph`` (a quantized IR; edited in place):
    the input becomes the raw image (float32 in the IR, QParams uint8 scale 1: the compiler
    turns it into an integer input) and the model reads ``<input>/normalized``.  Returns the
    raw inputs."""
    for proc in processors:
        t = proc.tensor
        inner = f"{t}/normalized"
        for node in graph.nodes:
            node.inputs = [inner if x == t else x for x in node.inputs]
        graph.outputs = [inner if x == t else x for x in graph.outputs]
        graph.tensors[inner] = TensorInfo(proc.shape, "float32")
        graph.qparams[inner] = graph.qparams.pop(t, None) or _value_range_qparams(proc)
        graph.tensors[t] = TensorInfo(proc.raw_shape, "float32")
        graph.qparams[t] = PIXEL
        b = _Builder(graph, proc)
        if proc.src_format in YUV_FORMATS:
            x, layout = b.yuv444(t), "NHWC"
        else:
            x, layout = t, proc.src_layout
        if layout == proc.tensor_layout:
            b.normalize(x, layout, inner)
            continue
        n, *rest = proc.shape
        moved = ((n, rest[1], rest[2], rest[0]) if proc.tensor_layout == "NCHW" else (n, rest[2], rest[0], rest[1]))
        y = b.normalize(x, layout, b.tensor("normalized_" + layout.lower(), moved, graph.qparams[inner]))
        b.node("layout", "Transpose", [y], inner, perm=(0, 3, 1, 2) if layout == "NHWC" else (0, 2, 3, 1))
    graph.toposort()
    return [p.tensor for p in processors]
