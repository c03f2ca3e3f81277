"""How far 16 bits take the layout detector: every ``quant_cfg`` role (weights and
activations) at 16 bits, ``accuracy_auto`` off, judged by its boxes on the evaluation pages
as bench/real_models.py judges the ``layout_cdla`` row.

The detector, its 32 calibration and 10 evaluation pages, the package's decoder and
``compare_detections`` are those of bench/real_models.py (agraph/detectors.py).  One
calibration per equalization setting (statistics in a temporary folder); each variant is the
quantized model (``to_quant()``) run by ``ratelnn.onnx_session``:

- activation thresholds: the default ``naive`` with the EMA of the per-page extremes, or the
  absolute min/max (``enable_EMA: false``);
- cross-layer equalization off or on.

Printed per variant: mean matched IoU, lost / reference detections above score 0.5, spurious,
mean score error, and the FP32 -> compiled score of the lost detections (five at most).  The default build
(int8 with int16 where the automatic step puts it) is the ``layout_cdla`` row of
docs/benchmarks.md; this script says what is left when bit width is no longer the limit.

    python bench/layout_16bit.py
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import cpu_name  # noqa: E402
from real_models import detection_text, layout_data, run_onnx  # noqa: E402

VARIANTS = (("EMA", False), ("min/max", False), ("EMA", True), ("min/max", True))


def main() -> int:
    import ratelnn
    from agraph import detectors
    from onnx_models import ort_session
    from ratelnn.config import QUANT_CFG_ROLES
    from ratelnn.frontend.onnx import converter
    from ratelnn.metrics import compare_detections

    proto, outputs, x_cal, x_test, shapes = layout_data()
    reference = detectors.layout_detections(run_onnx(ort_session(proto), "image", outputs, x_test, 1), shapes)
    print(f"layout_cdla, every quant_cfg role at 16 bits; {cpu_name()}")
    print("| thresholds | equalization | detections (unseen pages; lost: FP32 -> compiled score) |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for thresholds, equalized in VARIANTS:
            config = {"input_nodes": ["image"], "output_nodes": outputs, "input_shapes": [[1, *x_cal.shape[1:]]],
                      "output_dir": os.path.join(folder, f"equalization-{equalized}"), "accuracy_auto": False,
                      "equalization": equalized, "enable_EMA": thresholds == "EMA",
                      "quant_cfg": {role: {"num_bits": 16} for role in QUANT_CFG_ROLES}}
            conv = converter(proto, config)
            if not os.path.isdir(os.path.join(config["output_dir"], "ratel_stats")):
                conv.calibrate(x_cal, batch_size=1, progress=False)
            raw = run_onnx(ratelnn.onnx_session(conv.to_quant()), "image", outputs, x_test, 1)
            candidate = detectors.layout_detections(raw, shapes)
            result = compare_detections(reference, candidate)
            print(f"| {thresholds} | {'on' if equalized else 'off'} | {detection_text(result)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
