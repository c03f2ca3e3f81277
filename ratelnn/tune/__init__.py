"""Accuracy-driven search of quantization choices (docs/architecture.md §12,
docs/quantization.md "Accuracy tuning"): :func:`tune` (``ConvertImpl.tune``).

Every candidate is a plain dict of config keys (``quantize_algorithm``, ``auto_int16``,
``layer_configs`` and the accuracy passes' keys).  It is quantized from statistics already
recorded, compiled (``compile_graph``), priced (:mod:`.pricing`: the NPU cost model's
predicted latency of one inference and SRAM fit, plus a host estimate for layers it moves
off the NPU, :data:`HOST_FLOAT_MACS_PER_S`), and judged by running the compiled model in its
framework on ``data`` (engines on the emulated NPU: the integer arithmetic the NPU computes;
:mod:`.search`).  The :class:`Tuner` runs the steps, each budgeted (``max_evals``,
``time_budget_s``):

1. methods (:mod:`.methods`): ``naive``, ``kld``, ``percentile``, ``mse`` (all int8,
   ``auto_int16`` off); the ``naive`` one is the *all-int8 baseline* whose latency
   ``max_latency_ratio`` refers to;
2. passes (:mod:`.passes`) on the best so far, one at a time, kept when they raise the
   metric: ``equalization``, ``bias_correction`` (a key the config does not know is skipped;
   they cost no latency);
3. while the target is not met, the *int16 budget* (:mod:`.budget`): int16 on the layers
   losing most SQNR per predicted second, as many as the estimate fits in the latency limit;
4. while it is not met: ``auto_int16`` at its defaults and with a larger budget; then
   *recurrences* (:func:`recurrence_layers`): int16 on every quantized Add/Sub/Mul lying on a
   path of at least :data:`MIN_CHAIN` of them (an unrolled recurrence, such as an LSTM's cell
   state), kept when it raises the metric;
5. while it is not met, *borders* (:mod:`.borders`): every quantized tensor a numerically
   sensitive float op reads (:data:`SENSITIVE_OPS`: Log, Div, Sqrt, Pow, ...) kept fp32
   jointly with int16 on the quantized region upstream of it (back to the previous sensitive
   op or graph input), all borders at once, then each on its own; then, while it is not met,
   *islands* (:mod:`.islands`): fp32 on every engine that costs more on the NPU, its host
   transfers included, than its layers on the host (one candidate);
6. while it is not met: int16, then fp32, on the k least precise layers (:mod:`.layers`;
   k = 1, 2, 4, ...), by the SQNR each loses (``analysis.layer_rows``) or, where the numpy
   evaluator cannot run the graph, by the 8-bit SQNR its histogram predicts; then, while it
   is not met, ``adaround_iterations`` (:data:`LATE_PASSES`: minutes per try on a large
   model, so after every cheap dtype move) kept when it raises the metric;
7. once met (:mod:`.prune`): layer entries dropped again, one at a time, while the target
   still holds.

Held-out judgement (:mod:`.holdout`): every 4th sample of ``data`` is held out; the search
calibrates and judges on the rest, the chosen candidate is judged again on the held-out part
(``TuneResult.held_out_metric``) with a :class:`HeldOutWarning` when the two figures differ by
more than :data:`HELD_OUT_BOUND`.  The default build's own check and cheapest remedies
(config ``accuracy_auto``) reuse these steps: :mod:`.auto`.

AdaRound codes are cached per layer across candidates (``quantization.adaround.code_cache``).

Statistics (:mod:`.families`): one calibration per set of pass settings that needs its own,
each in ``<output_dir>/tune/<name>``.  ``TuneResult.config`` names that folder, so
``converter(graph_def, dict(config, **result.config))`` rebuilds the chosen model without
calibrating (engines byte-identical).
"""
from .auto import AUTO_METHODS, AutoDecision, auto_quantize
from .borders import SENSITIVE_OPS
from .holdout import HELD_OUT_BOUND, HELD_OUT_EVERY, HeldOutWarning, split_rows
from .methods import AUTO_INT16, METHODS
from .passes import LATE_PASSES, PASS_OFF, PASSES
from .pricing import HOST_FLOAT_MACS_PER_S, HOST_LAYER_OVERHEAD_S
from .recurrence import CHAIN_OPS, MIN_CHAIN, recurrence_layers
from .results import Point, TuneResult, cosine_metric, pareto_front
from .search import MIN_GAIN
from .tuner import Tuner, tune

__all__ = ["tune", "Tuner", "TuneResult", "Point", "pareto_front", "cosine_metric", "recurrence_layers",
           "METHODS", "AUTO_INT16", "PASSES", "PASS_OFF", "LATE_PASSES", "HOST_FLOAT_MACS_PER_S",
           "HOST_LAYER_OVERHEAD_S", "CHAIN_OPS", "MIN_CHAIN", "MIN_GAIN", "SENSITIVE_OPS", "HELD_OUT_BOUND",
           "HELD_OUT_EVERY", "HeldOutWarning", "split_rows", "AutoDecision", "auto_quantize", "AUTO_METHODS"]
