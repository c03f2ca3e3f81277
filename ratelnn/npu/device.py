"""The emulated NPU's devices and cores (docs/architecture.md §7).

The default machine is one device modelled on Alibaba's Hanguang 800 (public figures):
4 cores at 700 MHz, 48 MiB SRAM per core and no device DRAM, 825 TOPS int8 peak for the
device, a PCIe 4.0 x16 host link (~32 GB/s) shared by the cores.  Derivations of every
number are in ``docs/cost-model.md``.

The environment variable ``RATELNN_DEVICES`` lists cores per device, comma separated:
``"4"`` (the default), ``"4,4"`` (two devices of 4 cores), ``"2,4"``.  It is read on every
call, so a process can change it before asking.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import RatelError

ENV_DEVICES = "RATELNN_DEVICES"
MAX_CORES_PER_DEVICE = 64
MAX_DEVICES = 64

# Public Hanguang 800 figures.
HG800_CORES = 4
HG800_CLOCK_HZ = 700e6
HG800_INT8_PEAK_OPS = 825e12           # ops/s for the whole device; one MAC = 2 ops
HG800_SRAM_PER_CORE = 48 * 2**20        # bytes (4 x 48 MiB = "192 MB")
HOST_LINK_BYTES_PER_S = 32e9            # PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 / 8 ~ 31.5 GB/s
# MLPerf Inference v0.5, ResNet-50 v1.5, Hanguang 800 (the cost model's fit targets).
HG800_RESNET50_OFFLINE_IPS = 69_300.0   # Offline, images/s
HG800_RESNET50_SINGLESTREAM_S = 0.163e-3  # SingleStream latency, s


class DeviceConfigError(RatelError, ValueError):
    """The device configuration (environment variable or ``device_info``) is invalid."""


@dataclass(frozen=True)
class CoreSpec:
    """One NPU core.  Rates are per core, per clock cycle, at int8 unless stated.

    ``macs_per_cycle`` is derived from the device's int8 peak; the tensor-array tile
    dimensions only set how well a layer fills the array (utilisation), their product
    (64 x 64 x 36 = 147,456) is within 0.1 % of the derived peak.
    """

    clock_hz: float = HG800_CLOCK_HZ
    sram_bytes: int = HG800_SRAM_PER_CORE
    macs_per_cycle: float = HG800_INT8_PEAK_OPS / 2 / HG800_CLOCK_HZ / HG800_CORES  # 147,321.4
    int16_slowdown: float = 4.0         # int16 MACs run at 1/4 of the int8 rate (16x16 = 4 8x8 products)
    tile_reduce: int = 64               # tensor array: reduction (kh*kw*Cin) tile
    tile_out_channels: int = 64         # tensor array: output-channel tile
    tile_pixels: int = 36               # tensor array: output-pixel tile (batch x Ho x Wo)
    vector_ops_per_cycle: float = 2048.0  # vector unit: eltwise/pool/LUT element ops
    sram_bytes_per_cycle: float = 4096.0  # on-core SRAM read+write bandwidth
    core_link_bytes_per_cycle: float = 1024.0 # core-to-core interconnect, per core

    @property
    def peak_macs_per_s(self) -> float:
        """Int8 MACs per second of one core."""
        return self.macs_per_cycle * self.clock_hz


@dataclass(frozen=True)
class DeviceSpec:
    """One NPU device: its cores and the host link they share."""

    device_id: int = 0
    cores: Tuple[CoreSpec, ...] = field(default_factory=lambda: (CoreSpec(),) * HG800_CORES)
    host_link_bytes_per_s: float = HOST_LINK_BYTES_PER_S

    @property
    def num_cores(self) -> int:
        return len(self.cores)

    @property
    def core(self) -> CoreSpec:
        """The spec of this device's cores (all cores of a device are alike)."""
        return self.cores[0]

    @property
    def sram_bytes(self) -> int:
        return sum(c.sram_bytes for c in self.cores)

    @property
    def peak_int8_ops_per_s(self) -> float:
        return sum(2 * c.peak_macs_per_s for c in self.cores)

    def with_cores(self, num_cores: int) -> "DeviceSpec":
        """The same device with ``num_cores`` cores."""
        return replace(self, cores=(self.core,) * _check_core_count(num_cores, f"device {self.device_id}"))


def _check_core_count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DeviceConfigError(f"{where}: number of cores must be an integer, got {value!r}")
    if not 1 <= value <= MAX_CORES_PER_DEVICE:
        raise DeviceConfigError(f"{where}: number of cores must be in 1..{MAX_CORES_PER_DEVICE}, got {value}")
    return value


def parse_devices(text: str) -> List[int]:
    """Cores per device from a ``RATELNN_DEVICES`` string such as ``"4"`` or ``"2,4"``."""
    tokens = [t.strip() for t in text.split(",")]
    if not text.strip() or any(t == "" for t in tokens):
        raise DeviceConfigError(
            f"{ENV_DEVICES}={text!r}: expected cores per device separated by commas, e.g. '4' or '4,4'")
    if len(tokens) > MAX_DEVICES:
        raise DeviceConfigError(f"{ENV_DEVICES}={text!r}: at most {MAX_DEVICES} devices")
    counts = []
    for i, token in enumerate(tokens):
        try:
            count = int(token)
        except ValueError:
            raise DeviceConfigError(
                f"{ENV_DEVICES}={text!r}: device {i}: {token!r} is not a whole number of cores") from None
        counts.append(_check_core_count(count, f"{ENV_DEVICES}={text!r}: device {i}"))
    return counts


def get_devices() -> List[DeviceSpec]:
    """The emulated devices: ``RATELNN_DEVICES`` if set, else one HG800-like device of 4 cores."""
    text = os.environ.get(ENV_DEVICES)
    counts = [HG800_CORES] if text is None else parse_devices(text)
    return [DeviceSpec(device_id=i).with_cores(n) for i, n in enumerate(counts)]


def get_device(device_id: int) -> DeviceSpec:
    """One device by id; a clear error for an id that does not exist."""
    devices = get_devices()
    if isinstance(device_id, bool) or not isinstance(device_id, int):
        raise DeviceConfigError(f"device id must be an integer, got {device_id!r}")
    if not 0 <= device_id < len(devices):
        raise DeviceConfigError(
            f"device {device_id} does not exist: {len(devices)} device(s), ids 0..{len(devices) - 1}"
            f" (set {ENV_DEVICES} to configure more)")
    return devices[device_id]


def target_device(device_id: int) -> DeviceSpec:
    """The spec of device ``device_id`` as a compilation target.

    Compiling is ahead of time (docs/architecture.md §2): a ``device_info`` may name devices this machine's
    emulated runtime does not have.  A configured device is returned as configured; any other
    device is an HG800-like device (every emulated device has the same core spec)."""
    _check_device_id(device_id, "device id")
    devices = get_devices()
    return devices[device_id] if device_id < len(devices) else DeviceSpec(device_id=device_id)


def _check_device_id(device_id: Any, where: str) -> int:
    if isinstance(device_id, bool) or not isinstance(device_id, int):
        raise DeviceConfigError(f"{where}: device id must be an integer, got {device_id!r}")
    if not 0 <= device_id < MAX_DEVICES:
        raise DeviceConfigError(f"{where}: device id must be in 0..{MAX_DEVICES - 1}, got {device_id}")
    return device_id


def resolve_device_info(device_info: Optional[Mapping[Any, Any]]) -> Dict[int, List[int]]:
    """Normalise a ``device_info`` (docs/architecture.md §2) to ``{device_id: [core ids]}``.

    ``{}``/``None`` is the whole device 0 of the local configuration; ``{d: n}`` takes cores
    ``0..n-1`` of device ``d``; ``{d: [c, ...]}`` pins those cores.  An explicit
    ``device_info`` describes the *target* of an ahead-of-time compilation, so it may name
    devices and cores this machine's emulated runtime lacks (running the result checks them:
    :func:`check_placement`).  Malformed entries raise :class:`DeviceConfigError`: a device
    id or core id that is not an integer in range, a core count outside
    ``1..MAX_CORES_PER_DEVICE``, an empty or repeated core list.
    """
    if not device_info:
        return {0: list(range(get_device(0).num_cores))}
    if not isinstance(device_info, Mapping):
        raise DeviceConfigError(f"device_info must be a dict {{device_id: cores}}, got {type(device_info).__name__}")
    resolved: Dict[int, List[int]] = {}
    for device_id, cores in device_info.items():
        where = f"device_info[{device_id!r}]"
        _check_device_id(device_id, where)
        if isinstance(cores, (list, tuple)):
            if not cores:
                raise DeviceConfigError(f"{where}: the core list is empty")
            for c in cores:
                if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < MAX_CORES_PER_DEVICE:
                    raise DeviceConfigError(
                        f"{where}: core {c!r} does not exist (core ids are integers 0..{MAX_CORES_PER_DEVICE - 1})")
            if len(set(cores)) != len(cores):
                raise DeviceConfigError(f"{where}: repeated core ids in {list(cores)}")
            resolved[device_id] = list(cores)
        else:
            resolved[device_id] = list(range(_check_core_count(cores, where)))
    return resolved


def all_devices_info() -> Dict[int, int]:
    """``{device_id: number_of_cores}`` of every locally configured device (what an empty
    ``device_info`` means for joint compilation)."""
    return {d.device_id: d.num_cores for d in get_devices()}


class DeviceUnavailableError(DeviceConfigError, RuntimeError):
    """An engine is placed on a device or cores the local emulated runtime does not have."""


def missing_placement(device_id: int, core_ids: Sequence[int]) -> Optional[str]:
    """What of ``device_id``/``core_ids`` the local runtime lacks, in words; None if nothing."""
    devices = get_devices()
    local = ", ".join(f"device {d.device_id}: {d.num_cores} cores" for d in devices)
    have = f"the local emulated NPU has {len(devices)} device(s) ({local})"
    if not 0 <= device_id < len(devices):
        return f"device {device_id} does not exist: {have}"
    missing = sorted(c for c in core_ids if c >= devices[device_id].num_cores)
    if missing:
        return (f"device {device_id} has no core{'s' if len(missing) > 1 else ''} {missing}: {have}")
    return None


def check_placement(engine_name: str, device_id: int, core_ids: Sequence[int]) -> None:
    """Raise :class:`DeviceUnavailableError` if the engine ``engine_name``, placed on
    ``device_id``/``core_ids`` when it was compiled, cannot run on the local runtime."""
    device_id, core_ids = int(device_id), [int(c) for c in core_ids]
    problem = missing_placement(device_id, core_ids)
    if problem is not None:
        hint = placement_hint(device_id, core_ids)
        example = f" (e.g. {ENV_DEVICES}={hint})" if hint else ""
        raise DeviceUnavailableError(
            f"engine {engine_name!r} was compiled for device {device_id} cores {core_ids}, but {problem}; "
            f"set {ENV_DEVICES} to the cores per device of the target{example} or recompile with a "
            "device_info this machine has")


def placement_hint(device_id: int, core_ids: Sequence[int]) -> Optional[str]:
    """A ``RATELNN_DEVICES`` value that has ``device_id`` and ``core_ids`` (and keeps the
    configured devices at least as large); None for a device id no value can provide."""
    if not 0 <= device_id < MAX_DEVICES:
        return None
    counts = [d.num_cores for d in get_devices()]
    counts += [HG800_CORES] * max(0, device_id + 1 - len(counts))
    counts[device_id] = max(counts[device_id], min(max((int(c) for c in core_ids), default=0) + 1,
                                                   MAX_CORES_PER_DEVICE))
    return ",".join(str(c) for c in counts)
