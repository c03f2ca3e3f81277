"""Unique node names for a graph being emitted (framework export, compiled graphs)."""
from __future__ import annotations

from typing import Container, Iterable


class NameAllocator:
    """Hands out node names that are used once: :meth:`claim` keeps a tensor's own name when
    it is still free (so the user's output names survive), :meth:`fresh` derives a new one.
    Names in ``reserved`` (e.g. the IR's tensor names) are never handed out by :meth:`fresh`."""

    def __init__(self, reserved: Container[str] = (), used: Iterable[str] = ()) -> None:
        self.reserved = reserved
        self.used = set(used)

    def fresh(self, base: str) -> str:
        """``base`` with ``:`` made ``_`` (frameworks keep ``:`` for output indices), suffixed
        ``_1``, ``_2``, ... until unused."""
        base = base.replace(":", "_")
        name, i = base, 1
        while name in self.used or name in self.reserved:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name

    def claim(self, tensor: str) -> str:
        """The name for the node producing ``tensor``: its own name if free, else a fresh one."""
        if ":" not in tensor and tensor not in self.used:
            self.used.add(tensor)
            return tensor
        return self.fresh(tensor)
