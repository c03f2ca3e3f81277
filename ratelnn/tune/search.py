"""The state every step of a search shares (:class:`Search`): the data and the metric, the
statistics families, the evaluated candidates, the evaluation and time budget and the
all-int8 baseline; :meth:`Search.evaluate` prices and judges one candidate."""
from __future__ import annotations

import hashlib
import json
import math
import time
import warnings
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..calibration.data import DataError
from ..calibration.progress import Progress
from ..config import ConfigError
from ..errors import RatelError, TimeLimitExceeded
from ..quantization.adaround import code_cache
from ..quantization.layerwalk import time_limit
from ..quantization.policy import make_plan
from ..quantization.thresholds import KLDDegenerateWarning
from ..runners import run_model
from .families import Families
from .holdout import Part, call_metric, split_data
from .passes import known_passes, without_data_passes
from .pricing import host_seconds, price
from .results import Point, cosine_metric

MIN_GAIN = 1e-4          # a change is kept when it raises the metric by more than this


class Stop(Exception):
    """The evaluation or time budget is spent."""


class Search:
    """One search's shared state; the steps (:mod:`ratelnn.tune`) evaluate candidates on it."""

    def __init__(self, conv, data: Any, metric: Optional[Callable], target: float, max_latency_ratio: float,
                 max_evals: int, time_budget_s: Optional[float], calibration_data: Any, batch_size: Optional[int],
                 progress: bool, passes: Optional[Sequence[str]], hold_out: bool = True) -> None:
        self.conv = conv
        self.data, self.metric_fn, self.target = data, metric, float(target)
        self.ratio, self.max_evals, self.time_budget_s = float(max_latency_ratio), int(max_evals), time_budget_s
        self.batch_size, self.hold_out = batch_size, bool(hold_out)
        self.start = time.monotonic()
        self.history: List[Point] = []
        self.seen: Dict[str, Point] = {}
        self.user_layers = list(conv.config.get("layer_configs") or [])
        self.known_passes = known_passes(passes)
        self.families = Families(conv, self.known_passes, calibration_data,
                                 batch_size)
        self.evals = 0
        self.adaround_codes: Dict[str, np.ndarray] = {}   # quantization.adaround.code_cache
        self.baseline: Optional[Point] = None
        self.baseline_quantized: set = set()   # the nodes the all-int8 plan quantizes
        self.bar = Progress(self.max_evals, "tune", unit="candidates", enabled=progress)

    # ---------------------------------------------------------- budget and data
    def check_budget(self) -> None:
        """Stop when ``max_evals`` or ``time_budget_s`` is spent (never before the baseline)."""
        if self.baseline is None:   # the all-int8 baseline is always evaluated
            return
        if self.evals >= self.max_evals:
            raise Stop(f"stopped at max_evals={self.max_evals}")
        if self.time_budget_s is not None and time.monotonic() - self.start >= self.time_budget_s:
            raise Stop(f"stopped at time_budget_s={self.time_budget_s:g}")

    def prepare(self) -> None:
        """Batch ``data``, split it into the tuning and held-out parts (:mod:`.holdout`; the
        tuning part is also calibrated on unless ``calibration_data`` is given) and run the
        float model on both: the reference outputs and the float model's metric."""
        self.conv.handler.ensure_ops()
        batches = list(self.conv.calibration_data(self.data, self.batch_size))
        if not batches:
            raise DataError("tune: data holds no sample")
        samples = {k: np.concatenate([np.asarray(b.feeds[k])[:b.size] for b in batches]) for k in batches[0].feeds}
        self.tuning, self.held = split_data(self.data, samples, self.hold_out)
        if self.families.calibration_data is None:
            self.families.calibration_data = self.tuning.samples
        self.outputs = list(self.conv.config["output_nodes"])
        self.batches = self.batches_of(self.tuning)
        for part in (self.tuning, self.held):
            if part is not None:
                part.reference = self.run(self.conv.source, self.batches_of(part))
        self.fp32_metric = self.score(self.tuning.reference)

    def batches_of(self, part: Part) -> List[Tuple[Dict[str, np.ndarray], int]]:
        """(feeds, real rows) of ``part`` in the model's batches."""
        return [(b.feeds, b.size) for b in self.conv.calibration_data(part.samples, self.batch_size)]

    def run(self, model: Any, batches: Optional[List[Tuple[Dict[str, np.ndarray], int]]] = None) -> List[np.ndarray]:
        """The outputs of the framework ``model`` on every batch (default: the tuning part's),
        concatenated."""
        parts = [[o[:size] for o in run_model(self.conv.handler.framework, model, feeds, self.outputs)]
                 for feeds, size in (self.batches if batches is None else batches)]
        return [np.concatenate(p) for p in zip(*parts)]

    def score(self, outputs: List[np.ndarray], part: Optional[Part] = None) -> float:
        """The metric of ``outputs`` on ``part`` (default: the tuning part): the user's, or
        the lowest cosine to the float model's."""
        part = self.tuning if part is None else part
        if self.metric_fn is None:
            return cosine_metric(outputs, part.reference)
        value = call_metric(self.metric_fn, outputs, part)
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            raise ConfigError(f"tune: metric must return a finite number, got {value!r}")
        return number

    def judge_held_out(self, point: Point) -> Tuple[Optional[float], Optional[float]]:
        """(metric of ``point``'s compiled model, of the float model) on the held-out part;
        (None, None) when nothing is held out or ``point`` cannot be built."""
        if self.held is None:
            return None, None
        conv, _ = self.candidate(point.settings)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", KLDDegenerateWarning)
            compiled, _, _ = self.price(conv.quantized_ir(), conv)
        outputs = self.run(conv.handler.export_graph(compiled), self.batches_of(self.held))
        return self.score(outputs, self.held), self.score(self.held.reference, self.held)

    def candidate(self, settings: Mapping[str, Any]):
        """(converter of ``settings``, its statistics family's output_dir)."""
        return self.families.candidate(settings)

    # ---------------------------------------------------------- one candidate
    def evaluate(self, label: str, settings: Dict[str, Any], run: bool = True) -> Point:
        """Price and (``run``) judge one candidate; repeated settings are not evaluated again."""
        key = json.dumps(settings, sort_keys=True, default=str)
        if key in self.seen:
            return self.seen[key]
        self.check_budget()
        t0 = time.monotonic()
        deadline = None if self.time_budget_s is None or self.baseline is None else self.start + self.time_budget_s
        cheap = without_data_passes(settings, self.known_passes)
        try:
            conv, _ = self.candidate(settings)
            # a search tries kld on every tensor: no warning per try; AdaRound codes shared
            # by candidates with the same configuration upstream of a layer
            with warnings.catch_warnings(), time_limit(deadline), code_cache(self.adaround_codes):
                warnings.simplefilter("ignore", KLDDegenerateWarning)
                if self.baseline is not None and cheap != settings:
                    # priced before the data-driven passes run: they change codes, not dtypes
                    cheap_conv, _ = self.candidate(cheap)
                    try:
                        latency = self.price(cheap_conv.quantized_ir(), cheap_conv)[2]
                    except ValueError:   # no engine left
                        latency = None
                    if latency is not None and self.over(latency):
                        point = Point(label, settings, None, latency, False, time.monotonic() - t0,
                                      f"over {self.ratio:g} x all-int8 latency: not run (priced without the data-driven passes)")
                        return self.record(key, point)
                qgraph = conv.quantized_ir()
        except TimeLimitExceeded as e:   # a data-driven pass outran time_budget_s
            raise Stop(f"stopped at time_budget_s={self.time_budget_s:g} ({e}, trying {label})") from None
        except RatelError as e:   # missing statistics, a pass that cannot run on this graph
            point = Point(label, settings, None, math.nan, False, time.monotonic() - t0,
                          f"skipped: {type(e).__name__}: {str(e).splitlines()[0][:150]}")
            return self.record(key, point)
        try:
            compiled, prof, latency = self.price(qgraph, conv)
        except ValueError as e:   # no engine left
            point = Point(label, settings, None, math.nan, False, time.monotonic() - t0, f"skipped: {e}")
            return self.record(key, point)
        fits = all(e.latency.fits_sram for e in prof.engines)
        over = self.over(latency)
        metric, note = None, ""
        if over:
            note = f"over {self.ratio:g} x all-int8 latency: not run"
        elif run:
            model = conv.handler.export_graph(compiled)
            metric = self.score(self.run(model))
            self.evals += 1
            self.bar.update()
        digest = hashlib.sha256(b"".join(n.attrs["engine"] for n in compiled.nodes if n.op == "Engine"))
        point = Point(label, settings, metric, latency, fits, time.monotonic() - t0, note, digest.hexdigest())
        return self.record(key, point)

    def price(self, qgraph, conv) -> Tuple[Any, Any, float]:
        """(compiled graph, Profile, predicted latency of one inference: engines + host fp32
        layers) of the quantized ``qgraph`` of ``conv``; ValueError when it has no engine."""
        compiled, prof = price(qgraph, conv.config, conv.device_info)
        return compiled, prof, prof.latency_s + self.host_seconds(qgraph, conv.config)

    def host_seconds(self, qgraph, config) -> float:
        """Host time of the layers this candidate keeps in fp32 although the all-int8 plan
        quantizes them (:data:`~ratelnn.tune.pricing.HOST_FLOAT_MACS_PER_S`)."""
        if self.baseline is None:
            return 0.0
        return host_seconds(self.conv.graph, self.baseline_quantized - set(make_plan(qgraph, config).quantized_nodes))

    def record(self, key: str, point: Point) -> Point:
        self.seen[key] = point
        self.history.append(point)
        return point

    # ---------------------------------------------------------- judging points
    def over(self, latency: float) -> bool:
        """Whether ``latency`` exceeds the limit (``max_latency_ratio`` x the baseline's)."""
        return self.baseline is not None and latency > self.ratio * self.baseline.latency_s * (1 + 1e-9)

    def feasible(self, p: Point) -> bool:
        return (p.metric is not None and p.latency_s <= self.ratio * self.baseline.latency_s * (1 + 1e-9)
                and (p.fits_sram or not self.baseline.fits_sram))

    def meets(self, p: Point) -> bool:
        return self.feasible(p) and p.metric >= self.target

    def better(self, p: Point, than: Point) -> bool:
        return self.feasible(p) and p.metric > than.metric + MIN_GAIN

    # ---------------------------------------------------------- candidate settings
    def own_layers(self, point: Point) -> List[Dict[str, Any]]:
        """The layer entries the search added to ``point``'s settings (after the user's)."""
        return point.settings["layer_configs"][len(self.user_layers):]

    def with_layers(self, point: Point, entries: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
        """``point``'s settings with the search's layer entries replaced by ``entries``."""
        return dict(point.settings, layer_configs=self.user_layers + list(entries))
