"""Agreement of a quantized or compiled model's results with the float model's, judged as the
application sees them (:mod:`.detection`: detected boxes; :mod:`.cosine`: the cosine of each
output, and its scale-aware form)."""
from .cosine import cosine_gap_interval, lowest_agreement, lowest_cosine, norm_ratios, output_agreements, output_cosines
from .detection import DetectionAgreement, DetectionBounds, Detections, box_iou, compare_detections

__all__ = ["DetectionAgreement", "DetectionBounds", "Detections", "box_iou", "compare_detections", "cosine_gap_interval",
           "lowest_agreement", "lowest_cosine", "norm_ratios", "output_agreements", "output_cosines"]
