"""The firmware's thread: a large stack, the caller's stack size setting left as it was, errors
re-raised in the caller."""

from __future__ import annotations

import threading

import pytest

from quark.torch.extensions.brevitas._backend.targets.hls4ml.runner import FIRMWARE_STACK, on_firmware_stack


def test_the_function_runs_on_another_thread_and_returns_its_value():
    caller = threading.current_thread()
    ran_on = on_firmware_stack(threading.current_thread)
    assert ran_on is not caller and ran_on.name.startswith("hls4ml-firmware")
    assert threading.stack_size() == 0  # the interpreter's default again
    assert FIRMWARE_STACK >= 256 << 20


def test_errors_reach_the_caller():
    def fails(value):
        raise ValueError(f"bad {value}")

    with pytest.raises(ValueError, match="bad 3"):
        on_firmware_stack(fails, 3)
    assert threading.stack_size() == 0
