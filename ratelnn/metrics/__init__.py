"""Agreement of a quantized or compiled model's results with the float model's, judged as the
application sees them (:mod:`.detection`: detected boxes)."""
from .detection import DetectionAgreement, DetectionBounds, Detections, box_iou, compare_detections

__all__ = ["DetectionAgreement", "DetectionBounds", "Detections", "box_iou", "compare_detections"]
