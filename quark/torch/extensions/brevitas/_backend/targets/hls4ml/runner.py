"""The compiled firmware run on a thread with a large stack.

hls4ml's ``io_parallel`` C++ keeps every layer's output (and each convolution's window buffers) in
local arrays of the top function, on the stack of the thread that calls ``predict()`` / ``trace()``:
timm's MobileNetV4-small at 3x32x32 overflowed the main thread's 8 MiB (a segmentation fault that
ends the Python process). A thread's stack is reserved, not committed: pages are used only as the
firmware touches them. hls4ml could allocate those arrays statically in its C++ testbench wrapper.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

#: bytes of stack the firmware's thread gets
FIRMWARE_STACK = 1 << 30

T = TypeVar("T")


def on_firmware_stack(function: Callable[..., T], *args) -> T:
    """``function(*args)`` on a fresh thread with :data:`FIRMWARE_STACK` bytes of stack; its errors re-raised."""
    previous = threading.stack_size(FIRMWARE_STACK)
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hls4ml-firmware") as pool:
            future = pool.submit(function, *args)
    finally:
        threading.stack_size(previous)
    return future.result()
