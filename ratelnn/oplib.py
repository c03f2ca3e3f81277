"""Placeholder: being written (tf_init, mx_init, ops_library_path)."""


def tf_init():
    raise NotImplementedError


def mx_init():
    raise NotImplementedError


def ops_library_path(framework):
    raise NotImplementedError
