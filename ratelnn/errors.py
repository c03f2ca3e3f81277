"""Exceptions raised to users.  Each message names the node, tensor or file at fault."""


class RatelError(Exception):
    """Base class of ratelnn's own errors."""


class ModelError(RatelError, ValueError):
    """The model is malformed or does not match the configuration
    (unknown node name, wrong input rank, not frozen, missing params...)."""


class CalibrationError(RatelError, RuntimeError):
    """Calibration statistics are missing, corrupt or unusable (NaN/Inf)."""


class QuantizationError(ModelError):
    """A pre-quantized model's ranges (FakeQuant / QuantizeAndDequantize nodes) cannot be
    represented by the NPU's symmetric arithmetic; the message names the node."""


class DistributedError(RatelError, RuntimeError):
    """Work sent to a distributed executor was lost and could not be run again."""


class TimeLimitExceeded(RatelError, TimeoutError):
    """Work run under a time limit (``tune``'s ``time_budget_s``) did not finish in time;
    the message says where it stopped."""


class FrameworkNotInstalledError(RatelError, ImportError):
    """ratelnn needs TensorFlow or MXNet for what it was asked and that framework is not
    installed; the message names the extra that installs it (ratelnn.frameworks)."""
