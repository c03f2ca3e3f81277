"""A zoo model's FP32 build gives the same bytes in two processes (docs/agraph.md: the store's
export/import promises byte-identical models).  TensorFlow's freezing ordered the nodes of
mtcnn_rnet_tf by Python's hash seed (two builds under PYTHONHASHSEED 1 and 2 differed);
``ratelnn.frontend.tensorflow.freeze`` now emits one canonical order.  The builds only
construct and freeze a Keras net (no TF kernel runs), hence ``no_tf_math``."""
from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.paths import REPO
from helpers.stats import subprocess_env

pytestmark = pytest.mark.no_tf_math

BUILD = ("import sys, tensorflow\n"
         "from agraph.models.mtcnn_rnet_tf import model\n"
         "model.build(sys.argv[1])\n")


def test_tf_build_is_byte_identical_across_processes(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", BUILD, str(tmp_path / seed)], cwd=REPO,
                              env=subprocess_env(PYTHONHASHSEED=seed), stderr=subprocess.PIPE, text=True)
             for seed in ("1", "2")]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    first, second = ((tmp_path / seed / "mtcnn_rnet_tf.pb").read_bytes() for seed in ("1", "2"))
    assert first == second
