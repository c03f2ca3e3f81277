"""ratelnn.runners.session_callable: a Session step prepared once gives Session.run's outputs."""
import numpy as np
import pytest

from ratelnn.errors import ModelError
from ratelnn.runners import TFRunner, session_callable, tf_session_options

tf = pytest.importorskip("tensorflow")


def small_graph():
    """``(graph_def)``: x [None, 8, 8, 3] float32 -> conv 3x3 -> relu -> mean -> "out"; and
    a second input "k" (int32 scalar) -> "k2" = k * 2."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        w = tf.constant(rng.normal(size=(3, 3, 3, 5)).astype(np.float32))
        y = tf.nn.relu(tf.nn.conv2d(x, w, strides=1, padding="SAME"))
        tf.reduce_mean(y, axis=[1, 2], name="out")
        k = tf.compat.v1.placeholder(tf.int32, [], name="k")
        tf.multiply(k, 2, name="k2")
    return g.as_graph_def()


def session_of(graph_def):
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    config, run_options = tf_session_options(graph_def, intra_op_threads=2)
    return tf.compat.v1.Session(graph=g, config=config), g, run_options


def test_same_outputs_as_session_run():
    sess, g, run_options = session_of(small_graph())
    x, out, k, k2 = (g.get_tensor_by_name(n) for n in ("x:0", "out:0", "k:0", "k2:0"))
    step = session_callable(sess, [out, k2], [x, k], run_options)
    assert step.how == "Session._make_callable_from_options"
    for batch in (1, 3):
        images = np.random.default_rng(batch).normal(size=(batch, 8, 8, 3)).astype(np.float32)
        got = step(images, np.int32(5))
        want = sess.run([out, k2], {x: images, k: 5}, options=run_options)
        assert got[0].shape == (batch, 5) and got[0].dtype == np.float32
        np.testing.assert_array_equal(got[0], want[0])
        assert int(got[1]) == 10
    # float64 and list feeds are cast to the feed's dtype, as Session.run casts them
    images = np.random.default_rng(9).normal(size=(2, 8, 8, 3))
    np.testing.assert_array_equal(step(images, 1)[0], sess.run(out, {x: images.astype(np.float32)}))


def test_wrong_feeds_raise_clear_errors():
    sess, g, run_options = session_of(small_graph())
    x, out = g.get_tensor_by_name("x:0"), g.get_tensor_by_name("out:0")
    step = session_callable(sess, [out], [x], run_options)
    with pytest.raises(ModelError, match=r"takes 1 feed arrays \(x:0\), got 2"):
        step(np.zeros((1, 8, 8, 3), np.float32), np.zeros(1))
    with pytest.raises(ModelError, match=r"cannot feed an array of shape \(1, 8, 7, 3\) to x:0 of shape \(None, 8, 8, 3\)"):
        step(np.zeros((1, 8, 7, 3), np.float32))
    with pytest.raises(ModelError, match=r"cannot feed an array of shape \(8, 8, 3\) to x:0"):
        step(np.zeros((8, 8, 3), np.float32))
    with pytest.raises(ModelError, match=r"cannot feed x:0 \(float32\): could not convert string to float"):
        step(np.full((1, 8, 8, 3), "a"))


def test_a_feed_of_unknown_rank_takes_any_shape():
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, None, name="x")
        out = tf.reduce_sum(x, name="out")
    step = session_callable(tf.compat.v1.Session(graph=g), [out], [x])
    for shape in ((), (3,), (2, 3, 4)):
        assert step(np.ones(shape))[0] == np.prod(shape)


class RunOnly:
    """A session that only offers ``run`` (as one without the private callable method)."""

    def __init__(self, sess):
        self.run = sess.run


def test_falls_back_to_session_run_with_the_reason():
    sess, g, _ = session_of(small_graph())
    x, out = g.get_tensor_by_name("x:0"), g.get_tensor_by_name("out:0")
    step = session_callable(RunOnly(sess), [out], [x])
    assert step.how.startswith("Session.run: this TensorFlow's Session has no _make_callable_from_options")
    images = np.ones((2, 8, 8, 3), np.float32)
    np.testing.assert_array_equal(step(images)[0], sess.run(out, {x: images}))


def test_tf_runner_steps_per_feed_and_fetch_names():
    graph_def = small_graph()
    runner = TFRunner(graph_def)
    sess, g, _ = session_of(graph_def)
    images = np.random.default_rng(3).normal(size=(2, 8, 8, 3)).astype(np.float32)
    want = sess.run("out:0", {"x:0": images})
    np.testing.assert_array_equal(runner.run({"x": images}, ["out"])[0], want)
    np.testing.assert_array_equal(runner.run({"x:0": images}, ["out:0"])[0], want)
    assert runner.run({"k": 4}, ["k2"])[0] == 8
    assert len(runner.steps) == 3
    with pytest.raises(ModelError, match="no tensor 'nope'"):
        runner.run({"nope": images}, ["out"])
    runner.close()


def test_grappler_optimizes_in_one_round():
    """The runner's sessions run Grappler's optimizers once, not TensorFlow's default twice."""
    from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig
    config, _ = tf_session_options(small_graph())
    assert config.graph_options.rewrite_options.meta_optimizer_iterations == RewriterConfig.ONE
