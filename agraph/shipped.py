"""Pretrained nets whose weights installed PyPI packages ship, in Keras and ported to MXNet.

- MTCNN P-Net, R-Net, O-Net: ``mtcnn`` 1.0.0 (MIT licence), weights
  ``mtcnn/assets/weights/{pnet,rnet,onet}.lz4`` (joblib lists of the Keras weights in
  ``get_weights()`` order). Input: RGB pixels scaled by ``(p - 127.5) / 128``, HWC, no
  transposition (the nets' ``Permute((2, 1, 3))`` before the dense layers carries the
  original Caffe model's width/height order).
- fer's emotion net: ``fer`` 25.10.3 (MIT licence), a mini-Xception in
  ``fer/data/emotion_model.hdf5`` (Keras 2.0.5 h5): [N,64,64,1] grey in [-1, 1] -> [N,7]
  softmax over (angry, disgust, fear, happy, sad, surprise, neutral).

The MXNet ports (``mtcnn_mx``, ``fer_mx``) rebuild the same graphs as MXNet symbols in NCHW
and transfer the shipped weights: conv kernels HWIO -> OIHW, separable convs as a depthwise
(``num_group``) and a 1x1 convolution, dense weights transposed and their rows reordered from
the Keras ``Permute + Flatten`` order (w, h, c) to MXNet's NCHW flatten order (c, h, w),
PReLU alphas as per-channel ``LeakyReLU(act_type="prelu")`` gammas. Files are read from the
package folders; nothing is downloaded.
"""
from __future__ import annotations

import importlib.util
import json
import os
from typing import Any, Dict, List, Tuple

import numpy as np

MTCNN_SIZES = {"pnet": 12, "rnet": 24, "onet": 48}   # input side (pixels) of each net here
MTCNN_OUTPUTS = {"pnet": ["box", "prob"], "rnet": ["box", "prob"], "onet": ["box", "landmarks", "prob"]}
FER_SIZE = 64


def package_dir(name: str) -> str:
    """Folder of an installed package, found without importing it (``mtcnn`` imports TF;
    some of the packages of :mod:`agraph.pretrained` import APIs that current TensorFlow no
    longer has)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"package {name!r} is not installed (see the 'bench' extra of pyproject.toml)")
    return list(spec.submodule_search_locations)[0]


def mtcnn_weights(kind: str) -> List[np.ndarray]:
    """The shipped Keras weights of ``kind`` ("pnet" | "rnet" | "onet"), get_weights() order."""
    import joblib
    return [np.asarray(w, np.float32) for w in
            joblib.load(os.path.join(package_dir("mtcnn"), "assets", "weights", f"{kind}.lz4"))]


def fer_h5_path() -> str:
    return os.path.join(package_dir("fer"), "data", "emotion_model.hdf5")


# ---------------------------------------------------------------- Keras (TensorFlow)
def mtcnn_keras(kind: str, side: int | None = None):
    """The mtcnn package's net ``kind`` with its shipped weights as a Keras functional model:
    input ``images`` [N, side, side, 3] (default :data:`MTCNN_SIZES`) -> the outputs named in
    :data:`MTCNN_OUTPUTS` (P-Net: maps [N, h, w, 4] and [N, h, w, 2]; others [N, k])."""
    import keras
    from mtcnn.network.onet import ONet
    from mtcnn.network.pnet import PNet
    from mtcnn.network.rnet import RNet
    keras.backend.clear_session()   # fresh layer names: the same graph bytes on every build
    net = {"pnet": PNet, "rnet": RNet, "onet": ONet}[kind]()
    net.build()
    net.set_weights(mtcnn_weights(kind))
    side = side or MTCNN_SIZES[kind]
    images = keras.Input((side, side, 3), name="images")
    return keras.Model(images, list(net(images)), name=f"mtcnn_{kind}")


def fer_keras():
    """fer's mini-Xception, loaded from the package's h5 (inference only)."""
    import keras
    keras.backend.clear_session()
    return keras.models.load_model(fer_h5_path(), compile=False)


# ---------------------------------------------------------------- MXNet ports
MXModel = Tuple[Any, Dict[str, Any], Dict[str, Any]]   # (symbol, arg_params, aux_params)


class _Port:
    """Collects an MXNet symbol's parameters (numpy) while the graph is written."""

    def __init__(self, mx) -> None:
        self.mx, self.arg, self.aux = mx, {}, {}

    def var(self, name: str, value: np.ndarray, aux: bool = False):
        (self.aux if aux else self.arg)[name] = np.ascontiguousarray(value, np.float32)
        return self.mx.sym.var(name)

    def conv(self, x, name: str, kernel: np.ndarray, bias=None, stride: int = 1, pad: int = 0, group: int = 1):
        """Keras kernel [kh, kw, cin/group, cout] (depthwise: [kh, kw, c, 1])."""
        if group > 1:
            weight = kernel.transpose(2, 3, 0, 1)            # [c, 1, kh, kw]
        else:
            weight = kernel.transpose(3, 2, 0, 1)            # [cout, cin, kh, kw]
        inputs = dict(data=x, weight=self.var(f"{name}_weight", weight))
        if bias is not None:
            inputs["bias"] = self.var(f"{name}_bias", bias)
        return self.mx.sym.Convolution(**inputs, kernel=weight.shape[2:], stride=(stride, stride), pad=(pad, pad),
                                       num_filter=weight.shape[0], num_group=group, no_bias=bias is None,
                                       name=name)

    def dense(self, x, name: str, kernel: np.ndarray, bias: np.ndarray):
        """Keras kernel [in, out] -> FullyConnected weight [out, in]."""
        return self.mx.sym.FullyConnected(x, self.var(f"{name}_weight", kernel.T), self.var(f"{name}_bias", bias),
                                          num_hidden=kernel.shape[1], name=name)

    def prelu(self, x, name: str, alpha: np.ndarray):
        return self.mx.sym.LeakyReLU(x, gamma=self.var(f"{name}_gamma", alpha.reshape(-1)), act_type="prelu",
                                     name=name)

    def max_pool_same(self, x, name: str, k: int, s: int, side: int):
        """TF ``MaxPooling2D(k, s, padding="same")`` on a ``side`` x ``side`` map: TF pads
        ``total // 2`` before and the rest after, MXNet the same ``pad`` on both sides plus,
        in ceil mode ("full"), the cells the last window needs. Returns (symbol, out side)."""
        out = -(-side // s)
        total = max((out - 1) * s + k - side, 0)
        pad, convention = total // 2, "valid" if total % 2 == 0 else "full"
        mx_out = (side + 2 * pad - k + (s - 1 if convention == "full" else 0)) // s + 1
        if mx_out != out:
            raise ValueError(f"{name}: SAME pooling (k={k}, s={s}) of a {side}-pixel map has no MXNet form")
        return self.mx.sym.Pooling(x, kernel=(k, k), stride=(s, s), pad=(pad, pad), pool_type="max",
                                   pooling_convention=convention, name=name), out

    def model(self, outputs) -> MXModel:
        mx = self.mx
        sym = outputs[0] if len(outputs) == 1 else mx.sym.Group(outputs)
        return sym, {k: mx.nd.array(v) for k, v in self.arg.items()}, {k: mx.nd.array(v) for k, v in self.aux.items()}


def _permuted_dense(kernel: np.ndarray, side: int, channels: int) -> np.ndarray:
    """Keras dense kernel read after ``Permute((2, 1, 3)) + Flatten`` of an [h, w, c] map
    (row order w, h, c) -> the same kernel for MXNet's flatten of [c, h, w] (order c, h, w)."""
    out = kernel.shape[1]
    return kernel.reshape(side, side, channels, out).transpose(2, 1, 0, 3).reshape(-1, out)


def mtcnn_mx(mx, kind: str) -> MXModel:
    """The MTCNN net ``kind`` as an MXNet symbol with the shipped weights: input ``data``
    [N, 3, s, s] (s from :data:`MTCNN_SIZES`), outputs ``box``, [``landmarks``,] ``prob``
    (P-Net: [N, 4, 1, 1] and [N, 2, 1, 1], softmax over axis 1)."""
    w = iter(mtcnn_weights(kind))
    port = _Port(mx)
    side = MTCNN_SIZES[kind]
    x = mx.sym.var("data")
    if kind == "pnet":
        x = port.prelu(port.conv(x, "conv1", next(w), next(w)), "prelu1", next(w))
        x, side = port.max_pool_same(x, "pool1", 2, 2, side - 2)
        x = port.prelu(port.conv(x, "conv2", next(w), next(w)), "prelu2", next(w))
        x = port.prelu(port.conv(x, "conv3", next(w), next(w)), "prelu3", next(w))
        box = port.conv(x, "box", next(w), next(w))
        prob = mx.sym.softmax(port.conv(x, "conv4_2", next(w), next(w)), axis=1, name="prob")
        return port.model([box, prob])
    convs = [(28, 3), (48, 3), (64, 2)] if kind == "rnet" else [(32, 3), (64, 3), (64, 3), (128, 2)]
    pools = ["same3", "valid3", None] if kind == "rnet" else ["same3", "valid3", "same2", None]
    for i, ((channels, k), pool) in enumerate(zip(convs, pools), 1):
        x = port.prelu(port.conv(x, f"conv{i}", next(w), next(w)), f"prelu{i}", next(w))
        side -= k - 1
        if pool and pool.startswith("same"):
            x, side = port.max_pool_same(x, f"pool{i}", int(pool[-1]), 2, side)
        elif pool:
            x = mx.sym.Pooling(x, kernel=(3, 3), stride=(2, 2), pool_type="max", name=f"pool{i}")
            side = (side - 3) // 2 + 1
    fc = len(convs) + 1
    kernel = _permuted_dense(next(w), side, convs[-1][0])
    x = port.prelu(port.dense(mx.sym.flatten(x, name="flatten"), f"fc{fc}", kernel, next(w)), f"prelu{fc}", next(w))
    heads = [port.dense(x, name, next(w), next(w)) for name in MTCNN_OUTPUTS[kind][:-1]]
    prob = mx.sym.softmax(port.dense(x, f"fc{fc + 1}_cls", next(w), next(w)), axis=-1, name="prob")
    return port.model(heads + [prob])


def _h5_layers(h5) -> Tuple[List[dict], Dict[str, Dict[str, np.ndarray]]]:
    """Layer configs and weights ({layer: {variable: array}}) of a Keras 2 h5 model."""
    config = json.loads(h5.attrs["model_config"])["config"]
    weights = {}
    group = h5["model_weights"]
    for layer in group.attrs["layer_names"]:
        layer = layer.decode() if isinstance(layer, bytes) else layer
        names = [n.decode() if isinstance(n, bytes) else n for n in group[layer].attrs["weight_names"]]
        weights[layer] = {n.split("/")[-1].split(":")[0]: np.asarray(group[layer][n]) for n in names}
    return config["layers"], weights


def fer_mx(mx) -> MXModel:
    """fer's mini-Xception as an MXNet symbol with the shipped weights: ``data``
    [N, 1, 64, 64] in [-1, 1] -> ``prob`` [N, 7]. Written from the h5's layer list (Conv2D,
    SeparableConv2D, BatchNormalization, Activation, MaxPooling2D, Add, global average pool)."""
    import h5py
    port = _Port(mx)
    with h5py.File(fer_h5_path(), "r") as h5:
        layers, weights = _h5_layers(h5)
    tensors, sides = {}, {}
    for layer in layers:
        cls, cfg, name = layer["class_name"], layer["config"], layer["config"]["name"]
        inputs = [inbound[0] for inbound in layer["inbound_nodes"][0]] if layer["inbound_nodes"] else []
        x = tensors[inputs[0]] if inputs else None
        side = sides[inputs[0]] if inputs else FER_SIZE
        w = weights.get(name, {})
        if cls == "InputLayer":
            x = mx.sym.var("data")
        elif cls in ("Conv2D", "SeparableConv2D"):
            k, s = cfg["kernel_size"][0], cfg["strides"][0]
            if cfg["padding"] == "same" and not (k % 2 == 1 and (s == 1 or k == 1)):
                raise ValueError(f"{name}: SAME padding of kernel {k} stride {s} is not ported")
            pad = k // 2 if cfg["padding"] == "same" else 0
            if cls == "SeparableConv2D":
                depthwise = w["depthwise_kernel"]
                x = port.conv(x, f"{name}_dw", depthwise, stride=s, pad=pad, group=depthwise.shape[2])
                x = port.conv(x, name, w["pointwise_kernel"], w.get("bias"))
            else:
                x = port.conv(x, name, w["kernel"], w.get("bias"), stride=s, pad=pad)
            side = (side + 2 * pad - k) // s + 1
        elif cls == "BatchNormalization":
            x = mx.sym.BatchNorm(x, port.var(f"{name}_gamma", w["gamma"]), port.var(f"{name}_beta", w["beta"]),
                                 port.var(f"{name}_moving_mean", w["moving_mean"], aux=True),
                                 port.var(f"{name}_moving_var", w["moving_variance"], aux=True),
                                 eps=cfg["epsilon"], fix_gamma=False, use_global_stats=True, name=name)
        elif cls == "Activation" and cfg["activation"] == "relu":
            x = mx.sym.Activation(x, act_type="relu", name=name)
        elif cls == "Activation" and cfg["activation"] == "softmax":
            x = mx.sym.softmax(x, axis=-1, name="prob")
        elif cls == "MaxPooling2D" and cfg["padding"] == "same":
            x, side = port.max_pool_same(x, name, cfg["pool_size"][0], cfg["strides"][0], side)
        elif cls == "Add":
            x = mx.sym.elemwise_add(*[tensors[i] for i in inputs], name=name)
        elif cls == "GlobalAveragePooling2D":
            x = mx.sym.flatten(mx.sym.Pooling(x, kernel=(1, 1), global_pool=True, pool_type="avg", name=name),
                               name=f"{name}_flatten")
        else:
            raise ValueError(f"fer model layer {name} ({cls} {cfg.get('activation', '')}) is not ported")
        tensors[name], sides[name] = x, side
    return port.model([x])


def nchw(x: np.ndarray) -> np.ndarray:
    """NHWC batch -> contiguous NCHW."""
    return np.ascontiguousarray(np.asarray(x).transpose(0, 3, 1, 2))

