"""Python's cyclic garbage collector paused while a conversion step builds graphs.

Building a model allocates hundreds of thousands of objects (TensorFlow's Python ops when a
GraphDef is imported, IR nodes and their attributes, protobuf messages), and as they pile up
the collector makes full collections, each of which walks every tracked object of the process
whether it frees anything or not: 0.3-0.6 s apiece beside a 20,000-node graph.  Paused for the
step, the objects the step made are walked once, by the first collection after it
(docs/architecture.md §16, "Conversion time").  Reference counting still frees everything that
is not in a cycle during the step.

Only the steps that build graphs pause it, never a loop over user data: the calibration
batches run with the collector as the user left it.  Nested and concurrent steps share one
pause; the collector is enabled again when the last ends, and only if it was enabled when the
first began.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import threading
from typing import Callable, Iterator, TypeVar

_lock = threading.Lock()
_depth = 0              # steps inside a pause now
_resume = False         # the collector was enabled when the outermost pause began

F = TypeVar("F", bound=Callable)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The block runs with the cyclic collector disabled (see the module docstring)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()


def with_collector_paused(fn: F) -> F:
    """``fn`` run inside :func:`collector_paused`."""
    @functools.wraps(fn)
    def paused(*args, **kwargs):
        with collector_paused():
            return fn(*args, **kwargs)
    return paused  # type: ignore[return-value]
