"""Where a compiled hls4ml firmware that differs from torch first differs, and why.

hls4ml's ``trace()`` recompiles the C++ to record every layer's output; qonnx executes the same
prepared graph (its global pools left as qonnx runs them) on the same quantized input. The layers are
walked in hls4ml's order and the first whose output differs from the tensor it computes is named,
with its fixed-point type and whether the values overflow that type or fall off its grid.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np


def _range(precision) -> tuple[float, float, float]:
    """(lowest, highest, step) of an hls4ml fixed-point precision."""
    width, integer, signed = precision.width, precision.integer, precision.signed
    step = 2.0 ** (integer - width)
    if signed:
        return -(2.0 ** (integer - 1)), 2.0 ** (integer - 1) - step, step
    return 0.0, 2.0**integer - step, step


def first_difference(firmware, executable, sample: np.ndarray) -> str | None:
    """The first hls4ml layer whose output on ``sample`` (one quantized input, channels last) differs from
    qonnx's execution of ``executable`` (the prepared graph), as a sentence; None when every traced layer
    agrees."""
    from qonnx.core.onnx_exec import execute_onnx

    name = executable.graph.input[0].name
    reference = execute_onnx(executable, {name: sample[None]}, return_full_exec_context=True)
    layers = [layer for layer in firmware.get_layers() if layer.get_attr("function_cpp", None)]
    for layer in layers:
        layer.set_attr("trace", True)
    with contextlib.redirect_stdout(io.StringIO()):  # "Recompiling ... with tracing"
        _, traced = firmware.trace(np.ascontiguousarray(sample[None]))
    for layer in layers:
        tensor = layer.outputs[0]
        if layer.name not in traced or tensor not in reference:
            continue
        got = np.asarray(traced[layer.name], dtype=np.float64).reshape(-1)
        want = np.asarray(reference[tensor], dtype=np.float64)
        if want.ndim == 4 and list(want.shape[2:]) + [want.shape[1]] == list(layer.get_output_variable().shape):
            want = np.moveaxis(want, 1, -1)  # a pool the reference keeps channels-first (prepare's hls4ml_pools)
        want = want.reshape(-1)
        if got.shape != want.shape or np.array_equal(got, want):
            continue
        precision = layer.get_output_variable().type.precision
        low, high, step = _range(precision)
        outside = (want < low) | (want > high)
        why = (
            f"{int(outside.sum())} of its {want.size} values lie outside [{low:g}, {high:g}] (an overflow)"
            if outside.any()
            else f"values fall off its grid {step:g} (rounded or truncated)"
        )
        return (
            f"first differs at layer {layer.name} ({layer.class_name}, tensor {tensor}, type {precision}): "
            f"max |diff| {float(np.max(np.abs(got - want))):g}; {why}"
        )
    return None
