"""The op registry: one entry per IR op (docs/ir.md), read by the importers, exporters,
quantization policy, compiler, evaluator and docs/npu-supported-ops.md.

An entry says how each framework spells the op, how the quantization policy treats it and
how the NPU runs it.  Framework spellings: the importer reads every one of them, the exporter
writes the first (a binary op's MXNet form with broadcasting is the second; an op with
``mx_act`` is MXNet's ``Activation`` with that ``act_type``).  ONNX spellings only name op
types in configs (``layer_configs`` ``op_type``, docs/architecture.md §14).  Adding an op: see
docs/adding-an-op.md.  ``python -m ratelnn.ir.registry --markdown`` prints the supported-op
table of docs/npu-supported-ops.md.

Every question a pass asks about an op is answered here (its fields, the trait sets such as
:data:`WEIGHTED_OPS`, the queries such as :func:`is_weighted`); no other module lists op
names.  Ops can be added at run time (:func:`register`, :func:`temporary_op`): every table
derived from the registry follows.
"""
from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import difflib
from typing import Any, Callable, Dict, FrozenSet, Iterator, Mapping, Optional, Tuple, TypeVar

import numpy as np

from ..errors import RatelError

# operand forms: what the op reads (the policy quantizes an op only in this form)
UNARY, BINARY, VARIADIC, WEIGHTED, OTHER = "unary", "binary", "variadic", "weighted", "other"
FRAMEWORKS = ("tf", "mx", "onnx")
_FW_NAMES = {"tf": "TensorFlow", "mx": "MXNet", "onnx": "ONNX"}


class UnknownOpError(RatelError, LookupError):
    """A name that is not a registered IR op."""


@dataclasses.dataclass(frozen=True)
class OpDef:
    name: str                      # IR op name (docs/ir.md)
    tf: Tuple[str, ...] = ()       # TensorFlow op types; tf[0] is written
    mx: Tuple[str, ...] = ()       # MXNet ops; mx[0] is written (binary: mx[1] when broadcasting)
    onnx: Tuple[str, ...] = ()     # ONNX op types, for configs
    mx_act: Optional[str] = None   # the act_type when mx[0] is MXNet's Activation
    form: str = UNARY              # operands: x | a, b | x1..xn | x, w, [b] | other
    quantized: bool = False        # the quantization policy quantizes it (docs/quantization.md)
    scale_preserving: bool = False  # integer output at the input's scale (shares its QParams)
    input_role: str = "activations"   # quant_cfg roles (config.QUANT_CFG_DEFAULTS)
    output_role: str = "activations"
    weight_role: Optional[str] = None
    npu: Tuple[str, ...] = ()      # engine opcodes (engine.proto) it lowers to; () stays float
    cost: Optional[str] = None     # cost-model kind of its instructions (ratelnn.npu.costs)
    npu_when: str = ""             # lowering conditions, for docs/npu-supported-ops.md
    custom_op: bool = False        # a ratelnn custom operator (docs/architecture.md §5)
    # ---- traits the passes ask (docs/adding-an-op.md)
    fn: Optional[Callable[..., Any]] = None   # float definition on the input arrays (attribute-free ops):
                                   # ratelnn.ir.evaluate runs it, the compiler tabulates it for LUT
    lowering: str = ""             # ratelnn.compiler.lower routine: _RegionLowering.op_<lowering> and
                                   # _CHECKS[lowering]; default "table" for LUT, else the name in lower case
    moves_values: bool = False     # data movement: an integer input stays an integer (the same values)
    sensitive: bool = False        # kept float, result sensitive to small input errors (tuning borders)
    fused_act: str = ""            # the ``act`` a preceding weighted layer fuses it as
    affine: str = ""               # "add" / "sub" / "mul": adds, subtracts, multiplies its second operand
    commutative: bool = False      # a binary op whose operands may be swapped
    channelwise: bool = False      # output channel c reads only input channel c and commutes with a
                                   # positive per-channel scale (cross-layer equalization looks through it)
    foldable: bool = True          # constant folding may evaluate it (False: quantization/framework semantics)
    qdq: bool = False              # a quantize/dequantize op of the quantized (QDQ) model

    def __post_init__(self):
        if self.npu and not self.lowering:
            object.__setattr__(self, "lowering", "table" if self.npu == ("LUT",) else self.name.lower())

    @property
    def weighted(self) -> bool:
        """x, weights, [bias]: a layer the weight passes (BatchNorm folding, equalization, bias
        correction, AdaRound) work on; it takes a fused ``act`` and a bias."""
        return self.form == WEIGHTED

    @property
    def lut(self) -> bool:
        """A unary elementwise op the NPU runs as a table built from :attr:`fn`."""
        return self.npu == ("LUT",)


def _op(name: str, tf: str = "", mx: str = "", onnx: str = "", **kw) -> OpDef:
    return OpDef(name, tuple(tf.split()), tuple(mx.split()), tuple(onnx.split()), **kw)


def _lut(name: str, tf: str = "", mx: str = "", onnx: str = "", **kw) -> OpDef:
    """A unary elementwise op the NPU runs as a lookup table built from the IR's float
    definition (ratelnn.ir.evaluate)."""
    return _op(name, tf, mx, onnx, npu=("LUT",), cost="lut", npu_when=_LUT_WHEN, **kw)


_LUT_WHEN = "table from the IR's own float32 definition of the op (`make_lut`)"
_Q = dict(quantized=True)
_MOVE = dict(quantized=True, scale_preserving=True, cost="move", moves_values=True)
_CUSTOM = dict(custom_op=True, foldable=False)
_ID = lambda x: x  # noqa: E731
_BINARY_WHEN = ("two activations of the output's rank, or activation and constant (lower rank, or full rank "
                "with dim 0 = 1); for `Sub` the constant must be the second operand")
_POOL_WHEN = "`pads` < `ksize`"
_RESHAPE_WHEN = "batch dimension unchanged"

OPS: Tuple[OpDef, ...] = (
    # ---- weighted layers
    _op("Conv2D", "Conv2D DepthwiseConv2dNative", "Convolution", "Conv", form=WEIGHTED, **_Q,
        input_role="conv_activations", output_role="conv_output", weight_role="conv_weights",
        npu=("CONV2D",), cost="conv", lowering="conv2d",
        npu_when="incl. grouped, depthwise; weights and bias are params; `pads` smaller than the dilated kernel; "
                 "fused `act`: `none`, `relu` (clamp at 0), `relu6` (clamp to `[0, round(6/S_y)]`), "
                 "`leaky_relu` (scalar slope) and `prelu` (per-channel slopes), slopes of any sign "
                 "(`M_neg/2^s_neg ≈ α·S_x·S_w/S_y`, `M_neg` signed)"),
    _op("MatMul", "MatMul", "FullyConnected", "MatMul Gemm", form=WEIGHTED, **_Q,
        input_role="matmul_activations", output_role="matmul_output", weight_role="matmul_weights",
        npu=("FULLY_CONNECTED",), cost="fc", lowering="matmul",
        npu_when="weights (and bias) are params; `transpose_a` false; x is `[N, K]`; `transpose_b` weights "
                 "are transposed at compile time"),
    _op("BiasAdd", "BiasAdd", form=BINARY, affine="add"),
    _op("BatchNorm", "FusedBatchNormV3 FusedBatchNorm", "BatchNorm", "BatchNormalization", form=OTHER),
    # ---- elementwise
    _op("Add", "AddV2 Add", "elemwise_add broadcast_add broadcast_plus _plus _Plus _add _plus_scalar add_n "
        "ElementWiseSum", "Add", form=BINARY, **_Q, npu=("ADD",), cost="eltwise", npu_when=_BINARY_WHEN,
        fn=np.add, affine="add", commutative=True, lowering="binary"),
    _op("Sub", "Sub", "elemwise_sub broadcast_sub broadcast_minus _minus _sub _minus_scalar _rminus_scalar", "Sub",
        form=BINARY, **_Q, npu=("SUB",), cost="eltwise", npu_when=_BINARY_WHEN, fn=np.subtract, affine="sub",
        lowering="binary"),
    _op("Mul", "Mul", "elemwise_mul broadcast_mul _mul _mul_scalar", "Mul", form=BINARY, **_Q,
        npu=("MUL",), cost="eltwise", npu_when=_BINARY_WHEN, fn=np.multiply, affine="mul", commutative=True,
        lowering="binary"),
    _op("Div", "RealDiv", "elemwise_div broadcast_div _div _div_scalar _rdiv_scalar", "Div", form=BINARY,
        fn=np.divide, sensitive=True),
    _op("Maximum", "Maximum", "_maximum broadcast_maximum _maximum_scalar", "Max", form=BINARY, fn=np.maximum,
        commutative=True),
    _op("Minimum", "Minimum", "_minimum broadcast_minimum _minimum_scalar", "Min", form=BINARY, fn=np.minimum,
        commutative=True),
    _op("Relu", "Relu", "Activation relu", "Relu", mx_act="relu", **_Q, npu=("REQUANT",), cost="eltwise",
        npu_when="clamp at 0", fn=lambda x: np.maximum(x, np.float32(0)), fused_act="relu", lowering="relu"),
    _op("Relu6", "Relu6", "clip", "Clip", **_Q, npu=("REQUANT",), cost="eltwise", npu_when="clamp to 6",
        fn=lambda x: np.clip(x, np.float32(0), np.float32(6)), fused_act="relu6", lowering="relu"),
    _lut("Sigmoid", "Sigmoid", "Activation sigmoid LogisticRegressionOutput", "Sigmoid", mx_act="sigmoid", **_Q,
         fn=lambda x: np.float32(1) / (np.float32(1) + np.exp(-x))),
    _lut("Tanh", "Tanh", "Activation tanh", "Tanh", mx_act="tanh", **_Q, fn=np.tanh),
    _lut("LeakyRelu", "LeakyRelu", "LeakyReLU", "LeakyRelu", **_Q, fused_act="leaky_relu"),   # attr alpha
    _lut("Softsign", "Softsign", "Activation", "Softsign", mx_act="softsign", **_Q,
         fn=lambda x: x / (np.float32(1) + np.abs(x))),
    _lut("Softplus", "Softplus", "Activation", "Softplus", mx_act="softrelu",
         fn=lambda x: np.logaddexp(np.float32(0), x)),
    _lut("Exp", "Exp", "exp", "Exp", fn=np.exp, sensitive=True),
    _lut("HardSigmoid", onnx="HardSigmoid", **_Q),   # attrs alpha, beta
    _lut("HardSwish", onnx="HardSwish", **_Q,
         fn=lambda x: x * np.clip(x + np.float32(3), np.float32(0), np.float32(6)) / np.float32(6)),
    _op("PRelu", onnx="PRelu", form=BINARY),
    _op("Sqrt", "Sqrt", "sqrt", "Sqrt", fn=np.sqrt, sensitive=True),
    _op("Rsqrt", "Rsqrt", "rsqrt", fn=lambda x: np.float32(1) / np.sqrt(x), sensitive=True),
    _op("Neg", "Neg", "negative", "Neg", fn=np.negative),
    _op("Square", "Square", "square", fn=np.square),
    # ---- windows, reductions, data movement
    _op("Softmax", "Softmax", "softmax SoftmaxOutput SoftmaxActivation", "Softmax", **_Q, npu=("SOFTMAX",),
        cost="softmax", npu_when="last axis only"),
    _op("MaxPool", "MaxPool", "Pooling", "MaxPool GlobalMaxPool", **_Q, scale_preserving=True, cost="pool",
        input_role="maxpool_input", output_role="maxpool_output", npu=("MAX_POOL",), npu_when=_POOL_WHEN,
        lowering="pool", channelwise=True),
    _op("AvgPool", "AvgPool", "Pooling", "AveragePool", **_Q, input_role="avgpool_input",
        output_role="avgpool_output", npu=("AVG_POOL",), cost="pool",
        npu_when=_POOL_WHEN + "; `count_include_pad` either way", lowering="pool", channelwise=True),
    _op("Mean", "Mean", "mean", "ReduceMean GlobalAveragePool", **_Q, input_role="mean_input",
        output_role="mean_output", npu=("MEAN",), cost="pool", npu_when="axes exclude the batch"),
    _op("Concat", "ConcatV2", "Concat concat", "Concat", form=VARIADIC, **_Q, npu=("CONCAT",), cost="concat",
        npu_when="all inputs are activations; not along the batch axis"),
    _op("Reshape", "Reshape ExpandDims", "Reshape reshape", "Reshape", **_MOVE, input_role="reshape_input",
        output_role="reshape_output", npu=("RESHAPE",), npu_when=_RESHAPE_WHEN, lowering="reshape"),
    _op("Squeeze", "Squeeze", "squeeze", "Squeeze", **_MOVE, npu=("RESHAPE",), npu_when=_RESHAPE_WHEN,
        lowering="reshape"),
    _op("Flatten", "", "Flatten flatten", "Flatten", **_MOVE, input_role="reshape_input",
        output_role="reshape_output", npu=("RESHAPE",), npu_when=_RESHAPE_WHEN, lowering="reshape"),
    _op("Transpose", "Transpose", "transpose", "Transpose", **_MOVE, npu=("TRANSPOSE",),
        npu_when="`perm[0] == 0`"),
    _op("Pad", "PadV2 Pad", "Pad pad", "Pad", **_Q, npu=("PAD", "REQUANT"), cost="move",
        npu_when="no padding of the batch axis; value 0: `PAD`; other values: `REQUANT` + `PAD` (the value's "
                 "code at the output scale)", channelwise=True),
    _op("Identity", "Identity StopGradient Snapshot PreventGradient IdentityN PlaceholderWithDefault",
        "_copy identity Dropout BlockGrad stop_gradient LinearRegressionOutput MAERegressionOutput",
        "Identity Dropout", fn=_ID, moves_values=True),
    # ---- ratelnn's own ops and framework ops kept verbatim
    _op("MinMax", "RatelMinMax", "ratel_minmax", **_CUSTOM, fn=_ID),
    _op("Quant", "RatelQuant", "ratel_quant", "QuantizeLinear", **_CUSTOM, qdq=True),
    _op("Dequant", "RatelDequant", "ratel_dequant", "DequantizeLinear", **_CUSTOM, qdq=True),
    _op("Engine", "RatelEngineOp", "ratel_engine_op", form=VARIADIC, **_CUSTOM),
    _op("Opaque", form=VARIADIC, foldable=False),
)

BY_NAME: Dict[str, OpDef] = {op.name: op for op in OPS}
_generation = 0   # bumped by every change of the registry; derived tables rebuild on it


def _spellings(framework: str) -> Dict[str, Tuple[OpDef, ...]]:
    """Spelling -> the ops it names in ``framework`` (``tf``, ``mx`` or ``onnx``)."""
    out: Dict[str, Tuple[OpDef, ...]] = {}
    for op in OPS:
        for spelling in getattr(op, framework):
            out[spelling] = out.get(spelling, ()) + (op,)
    return out


SPELLINGS: Dict[str, Dict[str, Tuple[OpDef, ...]]] = {fw: _spellings(fw) for fw in FRAMEWORKS}


class _Derived:
    """A value computed from the registry, recomputed after :func:`register`/:func:`unregister`."""

    def __init__(self, build: Callable[[], Any]):
        self._build, self._seen, self._value = build, -1, None

    def value(self) -> Any:
        if self._seen != _generation:
            self._value, self._seen = self._build(), _generation
        return self._value


class _LiveSet(collections.abc.Set):
    """A set computed from the registry, kept current when ops are registered at run time;
    compares equal to a set of the same names."""

    def __init__(self, build: Callable[[], FrozenSet[str]]):
        self._names = _Derived(build)

    def __contains__(self, name: object) -> bool:
        return name in self._names.value()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._names.value()))

    def __len__(self) -> int:
        return len(self._names.value())

    def __hash__(self) -> int:
        return self._hash()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({sorted(self._names.value())})"


class OpSet(_LiveSet):
    """The names of the registered ops with a trait (``pred(opdef)`` true)."""

    def __init__(self, pred: Callable[[OpDef], bool]):
        super().__init__(lambda: frozenset(op.name for op in OPS if pred(op)))


def _live(table: Callable[[], Mapping]) -> Mapping:
    derived = _Derived(table)

    class _Table(collections.abc.Mapping):
        def __getitem__(self, key):
            return derived.value()[key]

        def __iter__(self):
            return iter(derived.value())

        def __len__(self):
            return len(derived.value())

    return _Table()


# ---- traits: which ops have them (live sets) and per-op queries
QUANTIZED_OPS = OpSet(lambda op: op.quantized)
NPU_OPS = OpSet(lambda op: bool(op.npu))
WEIGHTED_OPS = OpSet(lambda op: op.weighted)
LUT_OPS = OpSet(lambda op: op.lut)
CUSTOM_OPS = OpSet(lambda op: op.custom_op)
VALUE_MOVING_OPS = OpSet(lambda op: op.moves_values)
SENSITIVE_OPS = OpSet(lambda op: op.sensitive)
CHANNELWISE_OPS = OpSet(lambda op: op.channelwise)
AFFINE_OPS = OpSet(lambda op: bool(op.affine))          # per-channel affine ops a layer folds
ADDITIVE_OPS = OpSet(lambda op: op.affine in ("add", "sub"))
BIAS_OPS = OpSet(lambda op: op.affine == "add")         # the ones a layer's bias absorbs
FUSABLE_ACT_OPS = OpSet(lambda op: bool(op.fused_act))
# quantized ops with an output scale of their own (not scale-preserving): the ops whose
# activations a layer_configs entry puts in another data type
ACTIVATION_OPS = OpSet(lambda op: op.quantized and not op.scale_preserving)
# quantized elementwise ops of two operands (chains of them make recurrences)
QUANTIZED_BINARY_OPS = OpSet(lambda op: op.quantized and op.form == BINARY)
NOT_FOLDABLE_OPS = OpSet(lambda op: not op.foldable)
QDQ_OPS = OpSet(lambda op: op.qdq)

# framework op types outside the vocabulary (imported as Opaque) whose result is sensitive to
# small absolute input errors over a wide dynamic range, lower case
SENSITIVE_FRAMEWORK_TYPES = frozenset((
    "log", "log1p", "log2", "log10", "exp2", "expm1", "pow", "power", "_power", "broadcast_power",
    "_power_scalar", "_rpower_scalar", "reciprocal", "inv", "truediv", "divnonan", "div_no_nan", "xlogy",
    "xdivy", "floordiv"))


def _sensitive_types() -> FrozenSet[str]:
    return frozenset({s.lower() for op in OPS if op.sensitive for s in (op.name,) + op.tf + op.mx + op.onnx}
                     | SENSITIVE_FRAMEWORK_TYPES)


# lower-cased op types of numerically sensitive float ops: the sensitive IR ops with all their
# framework spellings, and SENSITIVE_FRAMEWORK_TYPES (an Opaque node is matched by its type)
SENSITIVE_OP_TYPES: collections.abc.Set = _LiveSet(_sensitive_types)


def of(name: str) -> Optional[OpDef]:
    """The entry of ``name``, None when it is not a registered IR op."""
    return BY_NAME.get(name)


def is_weighted(name: str) -> bool:
    return name in WEIGHTED_OPS


def is_lut(name: str) -> bool:
    return name in LUT_OPS


def is_custom(name: str) -> bool:
    return name in CUSTOM_OPS


def moves_values(name: str) -> bool:
    return name in VALUE_MOVING_OPS


def is_sensitive(name: str) -> bool:
    return name in SENSITIVE_OPS


def fused_act(name: str) -> str:
    """The ``act`` a weighted layer fuses op ``name`` as ("" when it cannot)."""
    op = BY_NAME.get(name)
    return op.fused_act if op else ""


def lowering(name: str) -> str:
    """The lowering routine of ``name`` in ratelnn.compiler.lower ("" when it stays float)."""
    op = BY_NAME.get(name)
    return op.lowering if op else ""


def cost_class(name: str) -> Optional[str]:
    """The cost-model class of the instructions ``name`` lowers to (ratelnn.npu.costs)."""
    op = BY_NAME.get(name)
    return op.cost if op else None


def float_fn(name: str) -> Optional[Callable[..., Any]]:
    """The float definition of ``name`` on its input arrays (None: it needs its node's attrs)."""
    op = BY_NAME.get(name)
    return op.fn if op else None


# ---- registering ops at run time
def _changed() -> None:
    global _generation
    _generation += 1
    for fw in FRAMEWORKS:
        SPELLINGS[fw] = _spellings(fw)


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the registry: from then on the importers read its spellings, the exporters
    write them, the policy, compiler and evaluator treat it by its fields.  Returns ``op``
    (the handle :func:`unregister` takes).  A ValueError when its name is taken."""
    global OPS
    if op.name in BY_NAME:
        raise ValueError(f"IR op {op.name!r} is already registered")
    if op.npu and op.lut and op.fn is None:
        raise ValueError(f"LUT op {op.name!r} needs its float definition (fn)")
    OPS = OPS + (op,)
    BY_NAME[op.name] = op
    _changed()
    return op


def unregister(op) -> None:
    """Remove an op (its OpDef or name) added by :func:`register`."""
    global OPS
    name = op if isinstance(op, str) else op.name
    if name not in BY_NAME:
        raise UnknownOpError(unknown_op_message(name))
    OPS = tuple(o for o in OPS if o.name != name)
    del BY_NAME[name]
    _changed()


def make_op(name: str, tf: str = "", mx: str = "", onnx: str = "", **fields) -> OpDef:
    """An OpDef as the entries of ``OPS`` are written: spellings space-separated."""
    return _op(name, tf, mx, onnx, **fields)


def make_lut_op(name: str, tf: str = "", mx: str = "", onnx: str = "", **fields) -> OpDef:
    """A unary elementwise op the NPU runs as a table built from ``fn`` (its float definition)."""
    return _lut(name, tf, mx, onnx, **fields)


@contextlib.contextmanager
def temporary_op(op: Optional[OpDef] = None, **fields) -> Iterator[OpDef]:
    """Register ``op`` (or ``make_op(**fields)``) for the ``with`` block, unregistered on
    exit (tests)."""
    if op is None:
        op = _op(**fields)
    register(op)
    try:
        yield op
    finally:
        unregister(op)


def get(name: str) -> OpDef:
    """The entry of IR op ``name``; :class:`UnknownOpError` names close IR ops otherwise."""
    op = BY_NAME.get(name)
    if op is None:
        raise UnknownOpError(unknown_op_message(name))
    return op


def unknown_op_message(name: str) -> str:
    hints = [f"{_FW_NAMES[fw]} spelling of {', '.join(o.name for o in SPELLINGS[fw][name])}"
             for fw in FRAMEWORKS if name in SPELLINGS[fw]]
    close = difflib.get_close_matches(name, list(BY_NAME), n=5, cutoff=0.5)
    return (f"unknown IR op {name!r}" + (f" (it is the {'; '.join(hints)})" if hints else "")
            + (f"; close IR ops: {', '.join(close)}" if close else ""))


def ir_ops(op_type: str) -> FrozenSet[str]:
    """IR ops an ``op_type`` of a config names: an IR op name, or a TensorFlow, MXNet or
    ONNX spelling (docs/architecture.md §14); an unknown name names only itself."""
    if op_type in BY_NAME:
        return frozenset({op_type})
    found = {op.name for fw in FRAMEWORKS for op in SPELLINGS[fw].get(op_type, ())}
    return frozenset(found or {op_type})


def config_op_types(op_type: str, where: str = "op_type") -> FrozenSet[str]:
    """:func:`ir_ops` for a name a user wrote (``layer_configs``/``op_processors`` ``op_type``):
    a ConfigError listing the known spellings when it names no op."""
    from ..config_forms import ConfigError
    if op_type in BY_NAME or any(op_type in SPELLINGS[fw] for fw in FRAMEWORKS):
        return ir_ops(op_type)
    every = list(BY_NAME) + [s for fw in FRAMEWORKS for s in SPELLINGS[fw]]
    close = difflib.get_close_matches(op_type, every, n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
    known = "; ".join([f"IR: {', '.join(BY_NAME)}"] + [f"{_FW_NAMES[fw]}: {', '.join(SPELLINGS[fw])}"
                                                       for fw in FRAMEWORKS])
    raise ConfigError(f"{where} {op_type!r} is not a known op type{hint}; known op types: {known}")


T = TypeVar("T")


def frontend_table(framework: str, specific: Mapping[str, T], generic: Callable[[OpDef, str], T]) -> Mapping[str, T]:
    """A frontend's translation table: framework spelling -> ``specific[spelling]`` where the
    translation is the frontend's own code, else ``generic(op, spelling)``.  Checks that every
    ``specific`` key is a registered spelling and that a spelling of several ops has its own
    translation.  The table follows the registry (an op registered later is translated)."""
    def build() -> Dict[str, T]:
        table = _spellings(framework)
        stray = sorted(set(specific) - set(table))
        if stray:
            raise UnknownOpError(f"{framework} translations for unregistered spellings {stray} "
                                 "(ratelnn/ir/registry.py)")
        shared = sorted(s for s, ops in table.items() if len(ops) > 1 and s not in specific)
        if shared:
            raise UnknownOpError(f"{framework} spellings {shared} name several IR ops and need their own translation")
        return {s: specific[s] if s in specific else generic(ops[0], s) for s, ops in table.items()}
    build()   # the checks, at import
    return _live(build)


def exporter_table(framework: str, specific: Mapping[str, T], generic: Callable[[OpDef], T]) -> Mapping[str, T]:
    """An exporter's table: IR op -> ``specific[op]`` where the exporter has its own code,
    else ``generic(opdef)`` for every op with a ``framework`` spelling.  Checks that every
    ``specific`` key is a registered op; follows the registry like :func:`frontend_table`."""
    stray = sorted(set(specific) - set(BY_NAME))
    if stray:
        raise UnknownOpError(f"{framework} exporters for unregistered IR ops {stray} (ratelnn/ir/registry.py)")
    return _live(lambda: {**{op.name: generic(op) for op in OPS if getattr(op, framework)}, **specific})


# ---------------------------------------------------------------- docs/npu-supported-ops.md
def markdown_table() -> str:
    """The supported-op table of docs/npu-supported-ops.md: NPU ops the policy quantizes,
    consecutive ops with the same cost class and conditions in one row."""
    rows = []
    for op in OPS:
        if op.quantized and op.npu:
            if rows and (rows[-1][0].cost, rows[-1][0].npu_when) == (op.cost, op.npu_when):
                rows[-1].append(op)
            else:
                rows.append([op])
    code = lambda names: ", ".join(f"`{n}`" for n in dict.fromkeys(names))  # noqa: E731
    lines = ["| IR op | TensorFlow | MXNet | ONNX | instructions | cost class | conditions |",
             "|---|---|---|---|---|---|---|"]
    for ops in rows:
        spell = [code(f"{s}(act_type={op.mx_act})" if s == "Activation" else s
                      for op in ops for s in getattr(op, fw)) for fw in FRAMEWORKS]
        lines.append(f"| {code(op.name for op in ops)} | {' | '.join(spell)} | "
                     f"{code(c for op in ops for c in op.npu)} | {ops[0].cost} | {ops[0].npu_when} |")
    float_only = code(op.name for op in OPS if op.npu and not op.quantized)
    unsupported = code(op.name for op in OPS if not op.npu and not op.custom_op)
    lines += ["", f"{float_only} have instructions but the quantization policy keeps them float, so they "
              f"stay framework ops. Not supported (stay float): {unsupported}, `MatMul` of two activations, "
              "per-channel activation quantization."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m ratelnn.ir.registry --markdown")
    sys.stdout.write(markdown_table())
