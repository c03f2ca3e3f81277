"""A real pretrained graph from a PyPI package: Spotify's basic-pitch
note-transcription model (``pip install --no-deps basic-pitch==0.4.0``, Apache-2.0; its
SavedModel ``basic_pitch/saved_models/icassp_2022/nmp``, not trained here) through
converter -> to_cal -> calibration -> to_quant -> to_npu on synthesized piano-like music
(agraph/pretrained.py).  The graph computes its harmonic CQT inside: ``ExpandDims`` axes and
``StridedSlice`` begin/end/strides feed CPU ops next to the engines (the border constants
that made ``to_npu()`` fail with a raw KeyError).

Asserted: it compiles into engines; the compiled model's outputs match the quantized
model's (cosine >= 0.999) and stay close to FP32 (cosine >= 0.9 for each of its three
outputs; measured by bench/real_models.py on 4 windows: contour 0.957, note 0.947,
onset 0.928).  Run with ``TF_ENABLE_ONEDNN_OPTS=0`` and ``=1``.
"""
from __future__ import annotations

import tempfile

import basic_pitch.constants  # noqa: F401  (the README's test command installs it; missing = failure)

BATCH = 2


def test_basic_pitch_cal_quant_npu():
    import ratelnn
    from agraph.pretrained import cosine, freeze_basic_pitch, run_batches, synth_music
    from ratelnn.frontend.tensorflow import converter

    ratelnn.tf_init()
    graph_def, inputs, outputs = freeze_basic_pitch()
    x_cal, x_test = synth_music(4, seed=0), synth_music(2, seed=1)
    config = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[BATCH, *x_cal.shape[1:]]],
              "output_dir": tempfile.mkdtemp(prefix="basic-pitch-")}
    conv = converter(graph_def, config)
    run_batches(conv.to_cal(), inputs[0], outputs, x_cal, BATCH)
    graph_quant = conv.to_quant()
    graph_npu = conv.to_npu(graph_quant)
    assert sum(n.op == "RatelEngineOp" for n in graph_npu.node) >= 1
    fp32, quant, npu = (run_batches(g, inputs[0], outputs, x_test, BATCH) for g in (graph_def, graph_quant, graph_npu))
    for name, f, q, n in zip(outputs, fp32, quant, npu):
        assert cosine(q, n) >= 0.999, name
        assert cosine(f, n) >= 0.9, name
