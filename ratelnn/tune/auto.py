"""Automatic defaults (docs/quantization.md "Automatic defaults"): the default build checks
itself and, where int8 loses too much, applies the cheapest remedies.

:func:`auto_quantize` (``ConvertImpl.quantized_ir`` with config ``accuracy_auto``) quantizes
from the statistics as configured, then scores the quantized IR (QDQ, numpy evaluator)
against the float IR on the held-out part of the kept calibration sample
(:func:`~ratelnn.tune.holdout.split_sample`: every 4th sample, the rule ``tune()`` splits its
data by): the lowest agreement over the outputs (:func:`~ratelnn.metrics.cosine.output_agreements`:
each output's cosine, lowered to its norm ratio to the float output where that is lower, so a
remedy that shrinks an output a consumer compares with a threshold is not taken for a gain; the
logits of an output a ``Softmax`` produces judged beside it,
:func:`~ratelnn.quantization.accuracy.softmax_logits`, since a confident softmax hides what they
lose; the lowest, so a small output that loses is not hidden by a large one that keeps its
values).  At or above ``accuracy_auto_cosine`` (:meth:`_Remedies.refine`), with the config's
threshold method the default, the other methods are tried from the same histograms (the
same int8 plan): the best is kept when it leaves at most :data:`CLEAR_ERROR_SHARE` of the
plain build's error (1 - figure), gaining :data:`CLEAR_MIN_GAIN` or more, on the held-out part
and on the fit part too (both parts
only fed the statistics; two looks, the second three times as large, so a method that gains
on a few held-out samples by chance is not taken); else the plain build is kept.
Below it, in order of cost, each step kept when it raises that figure by more than
:data:`~ratelnn.tune.search.MIN_GAIN`, stopping once the bound is met:

1. the other threshold methods (:data:`AUTO_METHODS`) from the same histograms;
2. cross-layer equalization (config ``equalization``): the equalized float graph calibrated
   again on the kept sample, its statistics in ``<output_dir>/auto/equalization``
   (:data:`EQUALIZED_DIR`; skipped when the graph has no pair to equalize);
3. empirical bias correction, fitted on the rest of the sample (itself checked on the held-out
   part, :mod:`ratelnn.quantization.accuracy`);
4. int16 (and fp32 where a sensitive float op reads) while the compiled model's predicted
   latency (NPU cost model, plus the host estimate of layers moved off the NPU) stays within
   ``accuracy_auto_latency_ratio`` x the all-int8 model's: on the chained elementwise layers of
   an unrolled recurrence (an LSTM's cell state,
   :func:`~ratelnn.tune.recurrence.recurrence_layers`); fp32 at the quantized tensors the
   numerically sensitive float ops read (a ``Log``, a ``Pow``) with int16 upstream of them
   (:func:`~ratelnn.tune.borders.border_moves`);
5. fp32 on the *islands* (tune's islands move, :func:`~ratelnn.tune.islands.island_moves`):
   the engines whose predicted latency, host transfers included, exceeds the host estimate of
   their layers in fp32 (small int8 regions between ops the NPU does not run), all at once;
6. int16 on the k least precise layers (the tuner's ranking, :func:`ranked_layers`, measured
   on the fit part, with the layers the output of lowest cosine depends on first),
   k = 1, 2, 4, ... up to the first k that meets the bound or passes the
   limit, then bisected as ``tune()`` bisects (:func:`~ratelnn.tune.layers.bisect_prefixes`):
   the fewest that meet the bound, else the most that fit;
7. fp32 on the k least precise layers of the same ranking, from the same start (the layer runs
   on the host in float: no bit width to lose), k found the same way; the better of steps 6
   and 7 is kept.
8. still below the bound: steps 1-3 judged again on top of the layer entries found
   (:meth:`_Remedies.reconsider`): the choice of each made at int8 undone, or not made taken,
   one at a time until the bound is met, each kept when it raises the figure (at most 3
   builds).

The decision (:class:`AutoDecision`) holds the config keys that rebuild the same model with
``accuracy_auto`` off (with equalization: also the ``output_dir`` of its statistics); it is
printed in one line, kept in the quantized IR's ``meta["accuracy_auto"]`` (so the compiled
IR's, and the exported models', :mod:`ratelnn.ir.recorded`; there that ``output_dir`` is
relative to the build's, :meth:`AutoDecision.record`) and in ``ConvertImpl.built_config``.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import os
import sys
import warnings
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..calibration.manifest import start_fresh
from ..config import DEFAULTS, normalize
from ..errors import RatelError
from ..ir import Graph
from ..ir.evaluate import EvaluationError
from ..quantization.accuracy import qdq_agreement, qdq_agreements
from ..quantization.layerwalk import chunked
from ..quantization.policy import make_plan
from .borders import border_entries, border_moves
from .entries import merged
from .holdout import split_sample
from .islands import island_moves, with_islands
from .layers import bisect_prefixes, doubling_sizes, ranked_layers
from .passes import known_passes
from .pricing import host_seconds, price
from .recurrence import unfixed_recurrence_layers
from .results import Point
from .search import MIN_GAIN

AUTO_METHODS = ("mse", "percentile", "kld")   # tried after the config's own method
EQUALIZED_DIR = os.path.join("auto", "equalization")   # under output_dir: the equalized graph's statistics
LOG = logging.getLogger("ratelnn.accuracy_auto")
CLEAR_ERROR_SHARE = 0.5   # bound met: another method is kept when it leaves at most this share of the error
CLEAR_MIN_GAIN = 1e-3     # ... and raises the figure by at least this much (0.9997 -> 0.9999 is no reason)
MAX_LINE_KEYS = 240   # characters of the decision's keys the line shows; longer: named, not shown
NOT_BUILT, OVER_LIMIT = "not built", "over the latency limit"   # why a candidate has no cosine


@dataclasses.dataclass
class AutoDecision:
    """What the automatic defaults did: ``cosine_before`` / ``cosine_after`` (lowest output
    agreement, the scale-aware cosine, on the ``held_out_samples``; None: not checked, see
    ``note``), ``settings`` (config keys that rebuild the chosen model with ``accuracy_auto``
    off; empty: plain build kept),
    ``latency_ratio`` (predicted latency over the all-int8 model's; None: not priced)."""

    cosine_before: Optional[float]
    cosine_after: Optional[float]
    settings: Dict[str, Any]
    latency_ratio: Optional[float]
    held_out_samples: int
    bound: float
    note: str

    def line(self) -> str:
        """The one-line summary the build prints."""
        if self.cosine_before is None:
            return f"accuracy_auto: {self.note}"
        head = (f"accuracy_auto: lowest output cosine (scale-aware) {self.cosine_before:.4f} on {self.held_out_samples} held-out "
                f"calibration samples")
        if not self.settings:
            return f"{head} (bound {self.bound:g}): {self.note}"
        ratio = "" if self.latency_ratio is None else f", predicted latency {self.latency_ratio:.2f} x all-int8"
        keys = json.dumps(self.settings)
        keys = keys if len(keys) <= MAX_LINE_KEYS else "the keys of built_config"
        return (f"{head} -> {self.cosine_after:.4f} with {describe(self.settings)}{ratio}; {self.note} "
                f"(reproduce: accuracy_auto=false with {keys})")

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def record(self, output_dir: str) -> Dict[str, Any]:
        """:meth:`to_dict` as a model carries it: the settings' ``output_dir`` (equalization's
        statistics) relative to the build's ``output_dir``, so the same build made in another
        folder records the same bytes; :func:`resolved` turns it back."""
        out = self.to_dict()
        stats_dir = out["settings"].get("output_dir")
        if stats_dir is not None:
            rel = os.path.relpath(str(stats_dir), str(output_dir))
            out["settings"]["output_dir"] = stats_dir if rel.startswith(os.pardir) else rel
        return out


def resolved(settings: Mapping[str, Any], output_dir: str) -> Dict[str, Any]:
    """``settings`` of a recorded decision (:meth:`AutoDecision.record`) with a relative
    ``output_dir`` taken under the build's ``output_dir`` again."""
    out = dict(settings)
    if out.get("output_dir") is not None and not os.path.isabs(str(out["output_dir"])):
        out["output_dir"] = os.path.join(str(output_dir), str(out["output_dir"]))
    return out


def describe(settings: Mapping[str, Any]) -> str:
    """The remedies of ``settings`` in a few words."""
    words = [f"{k}={v}" for k, v in settings.items() if k not in ("layer_configs", "accuracy_auto", "output_dir")]
    layers = settings.get("layer_configs") or []
    for dtype in ("int16", "fp32"):
        added = [e for e in layers if e.get("data_type") == dtype]
        if added:
            words.append(f"{dtype} on {len(added)} layer(s)")
    return ", ".join(words) or "plain int8"


class _Probe:
    """What :func:`ranked_layers` reads of a search: candidates of settings, the known passes,
    the first batch."""

    def __init__(self, remedies: "_Remedies", feeds) -> None:
        self.remedies, self.known_passes, self.batches = remedies, known_passes(None), [(feeds, None)]
        self.user_layers = remedies.user_layers

    def candidate(self, settings: Mapping[str, Any]):
        conv = self.remedies.converter(settings)[0]
        return conv, conv.config["output_dir"]


def with_settings(conv, settings: Mapping[str, Any]):
    """A shallow copy of ``conv`` with ``settings`` on its config and ``accuracy_auto`` off."""
    other = copy.copy(conv)
    other.config = normalize(dict(conv.config, **settings, accuracy_auto=False), conv.handler.framework)
    return other


def built_converter(conv, settings: Mapping[str, Any]):
    """A converter building ``settings`` with ``accuracy_auto`` off: :func:`with_settings`, or,
    where ``settings`` change the float graph (``equalization``), a new converter of the
    model (reading the statistics of the ``output_dir`` they name)."""
    if bool(settings.get("equalization", conv.config["equalization"])) == bool(conv.config["equalization"]):
        return with_settings(conv, settings)
    return type(conv)(conv.handler, conv.source, dict(conv.config, **settings, accuracy_auto=False), conv.device_info)


def auto_quantize(conv, stats: Mapping[str, Any]) -> Tuple[Graph, AutoDecision]:
    """(quantized IR, decision) of ``conv`` from ``stats`` (module docstring)."""
    config = conv.config
    bound = float(config["accuracy_auto_cosine"])
    qgraph = conv.quantize(stats)
    sample = conv._sample("accuracy_auto", required=False)
    fit, held = split_sample(sample) if sample is not None else (None, None)
    if held is None:
        return qgraph, AutoDecision(None, None, {}, None, 0, bound, "not checked: no calibration sample of 8 or more "
                                    "inputs (calibrate() keeps accuracy_samples of them)")
    n_held = min(len(v) for v in held.values())
    try:
        before, reference = qdq_agreement(conv.graph, qgraph, config, held)
    except EvaluationError as e:
        return qgraph, AutoDecision(None, None, {}, None, n_held, bound,
                                    f"not checked: {str(e).splitlines()[0][:150]}")
    step = below_one_step(qgraph, reference)
    if step is not None:
        return qgraph, AutoDecision(None, None, {}, None, n_held, bound,
                                    f"not checked: the float outputs on the held-out samples are all below one "
                                    f"quantization step of the outputs ({step:.3g}): their cosine says nothing; "
                                    "plain build kept")
    if before >= bound and config["quantize_algorithm"] != DEFAULTS["quantize_algorithm"]:   # the user's method
        return qgraph, AutoDecision(before, before, {}, 1.0, n_held, bound, "plain build kept")
    with warnings.catch_warnings():   # every method on every tensor: no warning per try
        warnings.simplefilter("ignore")
        remedies = _Remedies(conv, stats, sample, reference, bound)
        if before >= bound:
            return remedies.refine(qgraph, before, n_held)
        return remedies.run(qgraph, before, n_held)


def below_one_step(qgraph: Graph, reference) -> Optional[float]:
    """The smallest quantization step of ``qgraph``'s quantized outputs when every float
    output value in ``reference`` (the held-out samples', outputs first) is smaller than it:
    outputs the quantized model can only give as 0 (e.g. a detector's score map on inputs
    without anything to detect), whose cosine is noise; None otherwise."""
    steps = [float(np.max(qgraph.qparams[t].scale)) for t in qgraph.outputs if t in qgraph.qparams]
    if not steps or len(steps) < len(qgraph.outputs):
        return None
    largest = max(float(np.max(np.abs(r))) if np.size(r) else 0.0 for r in reference[:len(qgraph.outputs)])
    return min(steps) if largest < min(steps) else None


class _Remedies:
    """The remedy steps of :func:`auto_quantize` below the bound."""

    def __init__(self, conv, stats, sample, reference, bound: float) -> None:
        self.conv, self.sample = conv, sample
        self.fit, self.held = split_sample(sample)
        self.reference, self.bound = reference, bound
        self.user_layers = list(conv.config["layer_configs"])
        # equalization on or off -> (converter of that float graph, its statistics)
        self.bases = {bool(conv.config["equalization"]): (conv, stats)}
        self.all_int8 = dict(conv.config, auto_int16=False)
        self.baseline_quantized = set(make_plan(conv.graph, self.all_int8).quantized_nodes)

    @functools.cached_property
    def baseline(self) -> Optional[float]:
        """Predicted seconds of the all-int8 model (None: no engine), priced when first asked for."""
        return self.latency(self.conv.quantize(self.bases[bool(self.conv.config["equalization"])][1], self.all_int8),
                            self.conv.config)

    @functools.cached_property
    def limit(self) -> Optional[float]:
        """The remedies' latency budget, seconds (None: not priced)."""
        return None if self.baseline is None else self.baseline * float(self.conv.config["accuracy_auto_latency_ratio"])

    def converter(self, settings: Mapping[str, Any]):
        """(converter of ``settings``, the statistics it quantizes from)."""
        base, stats = self.bases[bool(settings.get("equalization", self.conv.config["equalization"]))]
        return with_settings(base, settings), stats

    def latency(self, qgraph: Graph, config) -> Optional[float]:
        """Predicted seconds of one inference of ``qgraph`` compiled (engines, plus the host
        estimate of layers it keeps in fp32 that the all-int8 model quantizes,
        :func:`~ratelnn.tune.pricing.host_seconds`); None without an engine."""
        try:
            engines = price(qgraph, config, self.conv.device_info)[1].latency_s
        except ValueError:
            return None
        moved = self.baseline_quantized - set(make_plan(qgraph, config).quantized_nodes)
        return engines + host_seconds(self.conv.graph, moved)

    def judge(self, settings: Mapping[str, Any], limited: bool = False) -> Tuple[Optional[float], Optional[Graph], str]:
        """(cosine on the held-out part, quantized IR, "") of ``settings``; (None, None, why)
        when they cannot be built (:data:`NOT_BUILT`) or, ``limited``, their predicted latency
        passes the limit (:data:`OVER_LIMIT`).  Each try is logged."""
        cosine, q, why = None, None, ""
        other, stats = self.converter(settings)
        try:
            q = other.quantize(stats)
            latency = self.latency(q, other.config) if limited else None
            if limited and (latency is None or latency > self.limit * (1 + 1e-9)):
                q, why = None, OVER_LIMIT
            else:
                cosine = qdq_agreement(self.conv.graph, q, other.config, self.held, self.reference)[0]
        except RatelError:
            q, why = None, NOT_BUILT
        LOG.debug("accuracy_auto: %s -> %s", describe(settings), why or f"{cosine:.4f}")
        return cosine, q, why

    def run(self, qgraph: Graph, before: float, n_held: int) -> Tuple[Graph, AutoDecision]:
        best = (before, {}, qgraph)
        config = self.conv.config
        for method in (m for m in AUTO_METHODS if m != config["quantize_algorithm"]):
            best = self.keep(best, dict(best[1], quantize_algorithm=method))
        if best[0] < self.bound and not config["equalization"] and self.equalized():
            best = self.keep(best, dict(best[1], equalization=True, output_dir=self.bases[True][0].config["output_dir"]))
        if best[0] < self.bound and config["bias_correction"] == "none":
            best = self.keep(best, dict(best[1], bias_correction="empirical"))
        note = "bound met" if best[0] >= self.bound else f"bound {self.bound:g} not met"
        if best[0] < self.bound and self.limit is not None:
            best, note = self.least_precise(self.islands(self.borders(self.recurrences(best))))
            if best[0] < self.bound and self.layers_of(best) != self.user_layers:
                best = self.reconsider(best)
                note = "bound met" if best[0] >= self.bound else note
        cosine, settings, q = best
        return q, AutoDecision(before, cosine, settings, self.latency_ratio(q, settings), n_held, self.bound, note)

    def refine(self, qgraph: Graph, before: float, n_held: int) -> Tuple[Graph, AutoDecision]:
        """The bound met (the config's method the default one): the other threshold methods
        (:data:`AUTO_METHODS`, from the same histograms), the best on the held-out part kept
        when it is confirmed twice (:func:`clearly_better`) on the held-out part and on the fit
        part (whose samples, like the held-out ones, only fed the statistics the thresholds
        come from; three times as many) and within the latency budget, else the plain build."""
        config = self.conv.config
        best, note, plain_fit = (before, {}, qgraph), "plain build kept", None
        for method in (m for m in AUTO_METHODS if m != config["quantize_algorithm"]):
            settings = {"quantize_algorithm": method}
            cosine, q, _ = self.judge(settings, limited=True)   # auto_int16 may promote other tensors
            if cosine is None or cosine <= best[0] + MIN_GAIN or not clearly_better(cosine, before):
                continue
            plain_fit = plain_fit or qdq_agreement(self.conv.graph, qgraph, config, self.fit)
            fit = qdq_agreement(self.conv.graph, q, self.converter(settings)[0].config, self.fit, plain_fit[1])[0]
            LOG.debug("accuracy_auto: %s on the fit part %.4f (plain build %.4f)", describe(settings), fit, plain_fit[0])
            if clearly_better(fit, plain_fit[0]):
                best, note = (cosine, settings, q), "bound met; clearly better on the held-out and the fit part"
        cosine, settings, q = best
        return q, AutoDecision(before, cosine, settings, self.latency_ratio(q, settings), n_held, self.bound, note)

    def latency_ratio(self, q: Graph, settings: Mapping[str, Any]) -> Optional[float]:
        """Predicted latency of ``q`` (built with ``settings``) over the all-int8 model's; 1.0
        for the plain build (no settings); None: not priced."""
        if not settings:
            return 1.0
        latency = self.latency(q, self.converter(settings)[0].config) if self.baseline else None
        return None if latency is None else latency / self.baseline

    def reconsider(self, best):
        """Steps 3, 2 and 1 judged again on top of ``best``'s layer entries: each choice made
        on the int8 model (bias correction, equalization, another method) undone, or one not
        made taken, one key at a time (:meth:`toggled`) until the bound is met, each kept when
        it raises the cosine within the latency limit; at most 3 builds.  With the activations
        in int16 what is left is mostly the int8 weights' rounding, whose mean shift bias
        correction removes although it gained nothing against the int8 activations' noise; a
        choice that won at int8 can lose (a clipping method, equalization's rescaled ranges)."""
        for key in ("bias_correction", "equalization", "quantize_algorithm"):
            settings = self.toggled(best[1], key)
            if settings is not None and best[0] < self.bound:
                best = self.keep(best, settings, limited=True)
        return best

    def toggled(self, settings: Mapping[str, Any], key: str) -> Optional[Dict[str, Any]]:
        """``settings`` with step 1-3's choice ``key`` undone (back to the config's), or, not
        made, taken (equalization where its graph was calibrated, empirical bias correction);
        None when there is nothing to toggle."""
        config = self.conv.config
        if key in settings:
            dropped = (key, "output_dir") if key == "equalization" else (key,)
            return {k: v for k, v in settings.items() if k not in dropped}
        if key == "equalization" and not config["equalization"] and True in self.bases:
            return dict(settings, equalization=True, output_dir=self.bases[True][0].config["output_dir"])
        if key == "bias_correction" and config["bias_correction"] == "none":
            return dict(settings, bias_correction="empirical")
        return None

    def keep(self, best, settings, limited: bool = False):
        """(cosine, settings, quantized IR) of ``settings`` (:meth:`judge`) when it beats
        ``best``, else ``best``."""
        cosine, q, _ = self.judge(settings, limited)
        return (cosine, settings, q) if cosine is not None and cosine > best[0] + MIN_GAIN else best

    def equalized(self) -> bool:
        """Whether the equalized float graph differs from the original and was calibrated on
        the kept sample (into ``<output_dir>/``:data:`EQUALIZED_DIR`)."""
        config = self.conv.config
        out = os.path.join(str(config["output_dir"]), EQUALIZED_DIR)
        try:
            conv = type(self.conv)(self.conv.handler, self.conv.source,
                                   dict(config, output_dir=out, equalization=True, accuracy_auto=False),
                                   self.conv.device_info)
            if conv.fingerprint == self.conv.fingerprint:   # no pair to equalize
                return False
            os.makedirs(out, exist_ok=True)
            start_fresh(out)
            stats = conv.calibrate(self.sample, progress=False)
        except RatelError as e:
            LOG.info("accuracy_auto: equalization not tried: %s", str(e).splitlines()[0])
            return False
        self.bases[True] = (conv, stats)
        return True

    def layers_of(self, best) -> list:
        """The ``layer_configs`` of ``best`` (the user's until a step adds entries), a new list."""
        return list(best[1].get("layer_configs", self.user_layers))

    def islands(self, best):
        """fp32 on the engines of ``best`` that cost more on the NPU than their layers on the
        host (tune's islands move, :func:`~ratelnn.tune.islands.island_moves`), on top of
        ``best``: kept when it raises the cosine within the latency limit."""
        layers = self.layers_of(best)
        moves = island_moves(_Probe(self, None), Point("auto", dict(best[1], layer_configs=layers), best[0], 0.0,
                                                       True, 0.0))
        if not moves:
            return best
        return self.keep(best, dict(best[1], layer_configs=with_islands(layers, moves)), limited=True)

    def recurrences(self, best):
        """int16 on the quantized elementwise chains of an unrolled recurrence on top of
        ``best``, kept when it raises the cosine within the latency limit."""
        conv, _ = self.converter(best[1])
        names = unfixed_recurrence_layers(conv, self.user_layers)
        if not names:
            return best
        settings = dict(best[1], layer_configs=self.user_layers + [{"layer_name": n, "data_type": "int16"}
                                                                   for n in names])
        return self.keep(best, settings, limited=True)

    def borders(self, best):
        """fp32 at every quantized tensor a numerically sensitive float op reads, with int16
        upstream of it (tune's borders move, :func:`~ratelnn.tune.borders.border_moves`), on
        top of ``best``: kept when it raises the cosine within the latency limit."""
        settings = dict(best[1], layer_configs=self.layers_of(best))
        moves = border_moves(_Probe(self, None), Point("auto", settings, best[0], 0.0, True, 0.0))
        if not moves:
            return best
        candidate = dict(settings, layer_configs=merged(settings["layer_configs"], border_entries(moves)))
        return self.keep(best, candidate, limited=True)

    def least_precise(self, best) -> Tuple[tuple, str]:
        """int16, then (bound not met) fp32, on the k least precise layers, each on top of
        ``best`` (:meth:`grow`); (the better found, a note)."""
        if best[0] >= self.bound:
            return best, "bound met"
        feeds = chunked(self.fit, (self.conv.config["input_shapes"] or [[None]])[0][0])[0][0]
        layers = self.layers_of(best)
        start = Point("auto", dict(best[1], layer_configs=layers,
                                   quantize_algorithm=best[1].get("quantize_algorithm",
                                                                  self.conv.config["quantize_algorithm"])),
                      best[0], 0.0, True, 0.0)
        try:
            ranked = self.worst_output_first(best, ranked_layers(_Probe(self, feeds), start))
        except (EvaluationError, RatelError) as e:
            return best, f"bound {self.bound:g} not met; layers not ranked: {str(e).splitlines()[0][:120]}"
        found = self.grow(best, layers, [r[1] for r in ranked if r[1]])
        if found[0][0] < self.bound:
            fp32 = self.grow(best, layers, [r[2] for r in ranked if r[2]])
            found = fp32 if fp32[0][0] > found[0][0] + MIN_GAIN else found
        return found

    def worst_output_first(self, best, ranked: list) -> list:
        """``ranked`` (:func:`ranked_layers`) with the layers the output of lowest held-out
        cosine under ``best`` depends on first, each part in its order: a layer off that
        output's path cannot raise the figure the judge reads."""
        other, _ = self.converter(best[1])
        agreements = qdq_agreements(self.conv.graph, best[2], other.config, self.held, self.reference)[0]
        graph = other.graph
        worst = min(agreements, key=agreements.get)
        LOG.debug("accuracy_auto: output agreements %s; ranking the layers of %s first",
                  ", ".join(f"{t} {c:.4f}" for t, c in agreements.items()), worst)
        path = graph.upstream([worst])
        path |= {n.name for n in graph.nodes if set(n.outputs) & path}
        return sorted(ranked, key=lambda option: option[0] not in path)

    def grow(self, best, layers: List[Dict[str, Any]], options: List[List[Dict[str, str]]]) -> Tuple[tuple, str]:
        """The entries of the first k ``options`` (least precise first) over ``layers`` on top of
        ``best``, k = 1, 2, 4, ... all until the bound is met or a candidate passes the latency
        limit (or cannot be built), then bisected as tune() bisects
        (:func:`~ratelnn.tune.layers.bisect_prefixes`): down to the fewest that meet the bound,
        or up to the most that fit; about 2 log2(len(options)) builds in all.  (The best
        found, a note.)"""
        found, missed = [best], {}

        def trial(k: int):
            settings = dict(best[1], layer_configs=merged(layers, [e for option in options[:k] for e in option]))
            cosine, q, why = self.judge(settings, limited=True)
            if why:
                missed.setdefault(why, k)
            elif cosine > found[0][0] + MIN_GAIN:
                found[0] = (cosine, settings, q)
            return cosine, settings, q

        met = bisect_prefixes(doubling_sizes(len(options)), trial, lambda c: c[0] is not None,
                              lambda c: c[0] >= self.bound)
        if met is not None:
            return met, "bound met"
        if OVER_LIMIT in missed:
            return found[0], f"bound {self.bound:g} not met within {self.limit / self.baseline:g} x the all-int8 latency"
        if NOT_BUILT in missed:
            return found[0], f"bound {self.bound:g} not met: {missed[NOT_BUILT]} layer(s) {NOT_BUILT}"
        return found[0], f"bound {self.bound:g} not met"


def clearly_better(figure: float, than: float) -> bool:
    """Whether ``figure`` is above ``than`` by :data:`CLEAR_MIN_GAIN` or more and leaves at most
    :data:`CLEAR_ERROR_SHARE` of its error (1 - figure): the margin a choice needs to replace a
    build that meets the bound."""
    return figure >= than + CLEAR_MIN_GAIN and 1.0 - figure <= CLEAR_ERROR_SHARE * (1.0 - than)


def report(decision: AutoDecision) -> None:
    """Print (stderr) and log ``decision``'s line."""
    line = decision.line()
    LOG.info(line)
    print(line, file=sys.stderr, flush=True)
