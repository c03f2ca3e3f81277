"""ratelnn: bring trained FP32 TensorFlow and MXNet models onto an (emulated) NPU.

See docs/architecture.md §2 for the public API.  Heavy frameworks are imported lazily: importing
ratelnn itself loads neither TensorFlow nor MXNet.
"""
from .config import QuantConfig
from .convert import ConvertImpl
from .joint.convert import JointConvertImpl
from .oplib import mx_init, ops_library_path, tf_init
from . import npu, profile

# ratelnn.npu.profile: the 0.1 name of ratelnn.profile.profile, in scripts written against the
# first README; set here because profiling reads framework models, above the NPU layer
npu.profile = profile.profile

__all__ = ["QuantConfig", "ConvertImpl", "JointConvertImpl", "tf_init", "mx_init",
           "ops_library_path", "onnx_session"]


def onnx_session(model, intra_op_threads: int = 0):
    """An ONNX Runtime session running ``model`` with ratelnn's custom ops (domain
    ``ratelnn``: calibration and compiled models; ratelnn/frontend/onnx/session.py)."""
    from .frontend.onnx.session import onnx_session as make
    return make(model, intra_op_threads)
__version__ = "0.1.0"
