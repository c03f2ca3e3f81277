"""agraph/pretrained.py's Keras 3 rebuild of textgenrnn's pretrained character model (its
Keras 2 ``CuDNNLSTM`` weights loaded untransposed give a model that runs but predicts at
chance, and every quantization of it "loses").  The weight conversion is checked on known
matrices, and the rebuilt model must predict the next character of real English text well
above chance (measured: top-1 36.7% on 1613 windows; the most frequent character 12.4%; the
untransposed weights 0.4%)."""
from __future__ import annotations

import numpy as np

from agraph.pretrained import package_dir

# the package's own code imports Keras 2 APIs, so it is found, not imported; the README's test
# command installs it, and missing is a failure (ImportError)
package_dir("textgenrnn")


def test_cudnn_lstm_weights_transposes_each_gate():
    from agraph.pretrained import cudnn_lstm_weights
    rng = np.random.default_rng(0)
    units, inputs = 3, 5
    w = [rng.normal(size=(units, inputs)) for _ in range(4)]       # cuDNN: W x, row-major [units, in]
    r = [rng.normal(size=(units, units)) for _ in range(4)]
    stored_kernel = np.hstack([g.reshape(inputs, units) for g in w])   # the same memory as (in, units)
    stored_recurrent = np.hstack(r)
    bias = np.arange(8 * units, dtype=np.float64)
    kernel, recurrent, summed = cudnn_lstm_weights(stored_kernel, stored_recurrent, bias)
    np.testing.assert_array_equal(kernel, np.hstack([g.T for g in w]))
    np.testing.assert_array_equal(recurrent, np.hstack([g.T for g in r]))
    np.testing.assert_array_equal(summed, bias[:4 * units] + bias[4 * units:])


def test_rebuilt_model_predicts_english_text():
    from agraph.pretrained import TEXT_LENGTH, english_text, load_textgenrnn, textgenrnn_vocab
    vocab = textgenrnn_vocab()
    ids = np.array([vocab.get(c, 0) for c in english_text()], np.int32)
    starts = np.arange(0, len(ids) - TEXT_LENGTH - 1, 17)
    x = np.stack([ids[s:s + TEXT_LENGTH] for s in starts])
    y = ids[starts + TEXT_LENGTH]
    top1 = float(np.mean(load_textgenrnn().predict(x, batch_size=128, verbose=0).argmax(1) == y))
    majority = np.bincount(y).max() / len(y)
    assert top1 > 0.25 and top1 > 2 * majority, (top1, majority)
