"""setup.py shim: all metadata lives in pyproject.toml.

The C++ ops are compiled on first use by ``ratelnn.tf_init()`` / ``ratelnn.mx_init()``
(and cached), because they must be built against the TensorFlow / MXNet that is installed.
"""
from setuptools import setup

setup()
