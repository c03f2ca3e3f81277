"""Emulated device configuration (docs/architecture.md §7) and ratelnn_runtime queries."""
import pytest

from ratelnn import ratelnn_runtime as rt
from ratelnn.errors import RatelError
from ratelnn.npu.device import (ENV_DEVICES, DeviceConfigError, DeviceSpec, get_devices, parse_devices,
                                resolve_device_info)


@pytest.fixture
def devices_env(monkeypatch):
    def set_devices(value):
        if value is None:
            monkeypatch.delenv(ENV_DEVICES, raising=False)
        else:
            monkeypatch.setenv(ENV_DEVICES, value)
    set_devices(None)
    return set_devices


def test_default_device_is_hg800_like(devices_env):
    assert rt.ratelnn_get_device_count() == 1
    assert rt.ratelnn_get_device_core_num(0) == 4
    assert rt.ratelnn_get_device_info() == {0: 4}
    device = get_devices()[0]
    core = device.core
    assert core.clock_hz == 700e6
    assert core.sram_bytes == 48 * 2**20
    assert device.sram_bytes == 192 * 2**20
    assert device.peak_int8_ops_per_s == pytest.approx(825e12)
    assert core.macs_per_cycle == pytest.approx(147_321.4, abs=0.1)
    assert core.peak_macs_per_s * 2 == pytest.approx(825e12 / 4)
    assert core.int16_slowdown == 4
    assert device.host_link_bytes_per_s == 32e9
    # the array geometry is within 0.1 % of the derived peak
    tiles = core.tile_reduce * core.tile_out_channels * core.tile_pixels
    assert abs(tiles / core.macs_per_cycle - 1) < 1e-3


@pytest.mark.parametrize("text, cores", [("4", [4]), ("4,4", [4, 4]), ("2,4", [2, 4]), (" 1 , 8 ", [1, 8])])
def test_env_var_sets_devices(devices_env, text, cores):
    devices_env(text)
    assert rt.ratelnn_get_device_count() == len(cores)
    assert [rt.ratelnn_get_device_core_num(i) for i in range(len(cores))] == cores
    assert rt.ratelnn_get_device_info() == dict(enumerate(cores))
    assert [d.device_id for d in get_devices()] == list(range(len(cores)))


@pytest.mark.parametrize("text, words", [
    ("", "expected cores per device"), ("4,", "expected cores per device"), (",4", "expected cores per device"),
    ("four", "'four' is not a whole number"), ("4.5", "'4.5' is not a whole number"),
    ("0", "must be in 1..64"), ("-2", "must be in 1..64"), ("4,100", "device 1"),
])
def test_bad_env_var_gives_clear_error(devices_env, text, words):
    devices_env(text)
    with pytest.raises(DeviceConfigError, match=ENV_DEVICES) as info:
        rt.ratelnn_get_device_count()
    assert words in str(info.value)
    assert isinstance(info.value, RatelError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("device_id", [1, -1, 7, "0", 0.0, True, None])
def test_invalid_device_id(devices_env, device_id):
    with pytest.raises(DeviceConfigError, match="device"):
        rt.ratelnn_get_device_core_num(device_id)


def test_second_device_exists_when_configured(devices_env):
    devices_env("2,4")
    assert rt.ratelnn_get_device_core_num(1) == 4
    with pytest.raises(DeviceConfigError, match="ids 0..1"):
        rt.ratelnn_get_device_core_num(2)


def test_resolve_device_info(devices_env):
    devices_env("4,2")
    assert resolve_device_info({}) == {0: [0, 1, 2, 3]}
    assert resolve_device_info(None) == {0: [0, 1, 2, 3]}
    assert resolve_device_info({0: 2}) == {0: [0, 1]}
    assert resolve_device_info({1: [1], 0: [3, 0]}) == {1: [1], 0: [3, 0]}
    # an explicit device_info is the target of an ahead-of-time compilation: devices and
    # cores the local runtime lacks are accepted (running checks them)
    assert resolve_device_info({2: 1, 1: 3, 0: [4]}) == {2: [0], 1: [0, 1, 2], 0: [4]}
    for bad, words in [({64: 1}, "device id must be in 0..63"), ({"1": 3}, "device id must be an integer"),
                       ({0: [64]}, "core 64 does not exist"), ({0: [1, 1]}, "repeated"), ({0: []}, "empty"),
                       ({0: 0}, "must be in 1.."), ({0: 65}, "must be in 1.."), ({0: "2"}, "must be an integer"),
                       ([0, 4], "must be a dict")]:
        with pytest.raises(DeviceConfigError, match=words):
            resolve_device_info(bad)


def test_parse_devices_and_with_cores():
    assert parse_devices("3,1") == [3, 1]
    assert DeviceSpec().with_cores(2).num_cores == 2
    with pytest.raises(DeviceConfigError):
        DeviceSpec().with_cores(65)
