"""Statistics families: the calibrations a search's candidates share.  One per set of pass
settings that needs its own (a pass that changes the float graph, or whose quantizer reads
statistics the base calibration lacks), each in ``<output_dir>/tune/<name>``; every method
reads the same histograms."""
from __future__ import annotations

import copy
import os
from typing import Any, Dict, Mapping, Optional, Tuple

from ..calibration.manifest import start_fresh
from ..config import normalize
from ..errors import CalibrationError
from .passes import PASS_OFF

# every candidate is built exactly as its settings say: no automatic remedies on top
PLAIN = {"accuracy_auto": False}


class Families:
    """The statistics families of one search on the converter ``conv``."""

    def __init__(self, conv, known_passes, calibration_data: Any, batch_size: Optional[int]) -> None:
        self.conv, self.known_passes = conv, known_passes
        self.calibration_data, self.batch_size = calibration_data, batch_size
        self.root = os.path.join(str(conv.config["output_dir"]), "tune")
        self.found: Dict[str, Tuple[Any, str]] = {}

    def family(self, settings: Mapping[str, Any]):
        """(converter, output_dir) for the pass settings of ``settings``: the base
        calibration when it serves them, else their own."""
        passes = {k: settings[k] for k, _ in self.known_passes if k in settings and settings[k] != PASS_OFF[k]}
        name = "base" if not passes else "-".join(f"{k}={v}" for k, v in sorted(passes.items()))
        if name in self.found:
            return self.found[name]
        base = self.found.get("base")
        if base is None:
            conv, out = self._calibrated("base", {})
        else:
            conv = type(self.conv)(self.conv.handler, self.conv.source,
                                   dict(self.conv.config, output_dir=base[1], **passes, **PLAIN), self.conv.device_info)
            out = base[1]
            if conv.fingerprint != base[0].fingerprint or not _quantizes(conv):
                conv, out = self._calibrated(name, passes)
        self.found[name] = (conv, out)
        return conv, out

    def base(self):
        """The converter of the base calibration (after the first :meth:`family` call)."""
        return self.found["base"][0]

    def candidate(self, settings: Mapping[str, Any]):
        """(converter of ``settings``: its statistics family's, with the candidate's normalized
        config; that family's output_dir)."""
        family, out = self.family(settings)
        conv = copy.copy(family)
        conv.config = normalize(dict(self.conv.config, output_dir=out, **PLAIN, **settings), family.handler.framework)
        return conv, out

    def _calibrated(self, name: str, passes: Mapping[str, Any]):
        out = os.path.join(self.root, _slug(name))
        os.makedirs(out, exist_ok=True)
        start_fresh(out)
        conv = type(self.conv)(self.conv.handler, self.conv.source, dict(self.conv.config, output_dir=out, **passes, **PLAIN),
                               self.conv.device_info)
        conv.calibrate(self.calibration_data, self.batch_size, progress=False)
        return conv, out


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_=." else "_" for c in name)


def _quantizes(conv) -> bool:
    """Whether ``conv`` quantizes from the statistics in its output_dir."""
    try:
        conv.quantized_ir()
        return True
    except CalibrationError:
        return False
