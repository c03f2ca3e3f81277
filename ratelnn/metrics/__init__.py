"""Agreement of a quantized or compiled model's results with the float model's, judged as the
application sees them (:mod:`.detection`: detected boxes; :mod:`.cosine`: the cosine of each
output)."""
from .cosine import lowest_cosine, output_cosines
from .detection import DetectionAgreement, DetectionBounds, Detections, box_iou, compare_detections

__all__ = ["DetectionAgreement", "DetectionBounds", "Detections", "box_iou", "compare_detections", "lowest_cosine",
           "output_cosines"]
