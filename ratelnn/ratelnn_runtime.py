"""Runtime queries about the emulated NPU devices (docs/architecture.md §2, §7).

The devices come from ``RATELNN_DEVICES`` (cores per device, e.g. ``"4,4"``); by default one
Hanguang-800-like device of 4 cores.
"""
from __future__ import annotations

from typing import Dict

from .npu.device import get_device, get_devices


def ratelnn_get_device_count() -> int:
    """Number of emulated NPU devices."""
    return len(get_devices())


def ratelnn_get_device_core_num(device_id: int) -> int:
    """Number of cores of device ``device_id``; raises DeviceConfigError for an unknown id."""
    return get_device(device_id).num_cores


def ratelnn_get_device_info() -> Dict[int, int]:
    """``{device_id: number_of_cores}`` for every device (usable as a ``device_info``)."""
    return {d.device_id: d.num_cores for d in get_devices()}
