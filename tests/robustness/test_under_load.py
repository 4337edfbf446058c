"""Point 5 of issue 11: under load.

Calibration statistics are running, not stored (the observers' state does not grow with the
number of batches, and no batch outlives its step; ``benchmarks/calibration_memory.py`` measures
the process's peak memory); the package works under ``torch.inference_mode`` and
``torch.no_grad``; a quantized model runs under ``torch.compile`` with outputs equal to eager.
"""

from __future__ import annotations

import gc
import os
import weakref

import pytest
import torch

from quark.torch.extensions.brevitas.api import ModelExporter
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, ScaleType, TQTThresholdInitMeth
from quark.torch.quantization.observer import (
    OBSERVERS,
    TQT3SDObserver,
    TQTJeffreysObserver,
)
from quark.torch.quantization.observer.selectors import _SelectorObserver
from robustness.helpers import W8A8, batches, mlp, quantize

#: every observer that accumulates statistics (the selectors of Quark's names, e.g. PerBlockMXObserver,
#: only choose a format whose scale the quantizer computes: they never observe)
#: (AMD Quark's power-of-two observers vote: they keep a count per (power-of-two scale, zero point)
#: grid that a batch chose, no tensor: at most 255 exponents x 2^bits zero points, whatever the data)
ALL_OBSERVERS = [
    cls
    for _, cls in sorted(OBSERVERS.items())
    if not issubclass(cls, _SelectorObserver) and not getattr(cls, "power_of_two", False)
] + [TQT3SDObserver, TQTJeffreysObserver]


def _state_bytes(observer) -> int:
    tensors = [*observer.buffers(), *(v for v in vars(observer).values() if isinstance(v, torch.Tensor))]
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("observer_cls", ALL_OBSERVERS, ids=lambda c: c.__name__)
def test_observer_state_does_not_grow_with_the_number_of_batches(observer_cls):
    g = torch.Generator().manual_seed(0)
    data = [torch.randn(16, 64, generator=g) * 2.0 ** (i % 9) for i in range(64)]  # ranges that keep growing
    sizes = []
    for count in (1, 64):
        observer = observer_cls(symmetric=False, ch_axis=1)
        for x in data[:count]:
            observer(x)
        sizes.append(_state_bytes(observer))
    assert sizes[0] > 0 and sizes[0] == sizes[1]


ALL_STATISTICS = Config(
    QuantizationConfig(weight=W8A8.global_quant_config.weight),
    layer_quant_config={
        "0": QuantizationConfig(input_tensors=QuantizationSpec(dtype=Dtype.int8, observer_cls=OBSERVERS["PerTensorPercentileObserver"])),
        "2": QuantizationConfig(
            input_tensors=QuantizationSpec(dtype=Dtype.uint8, symmetric=False, observer_cls=OBSERVERS["PerTensorMSEObserver"]),
            output_tensors=QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._LL_J)),
        ),
    },
)


def test_calibration_keeps_no_batch():
    """Batches made on the fly are freed as calibration goes: when the generator makes the next
    one, at most the previous one is still referenced (by the loop variable)."""
    alive, most_alive = [], 0
    g = torch.Generator().manual_seed(0)

    def generate():
        nonlocal most_alive
        for _ in range(8):
            gc.collect()
            most_alive = max(most_alive, sum(ref() is not None for ref in alive))
            x = torch.randn(8, 12, generator=g)
            alive.append(weakref.ref(x))
            yield x

    qmodel = quantize(mlp(), generate(), ALL_STATISTICS)
    gc.collect()
    assert len(alive) == 8 and most_alive <= 1
    assert [ref for ref in alive if ref() is not None] == []
    assert qmodel(torch.randn(2, 12)).isfinite().all()


# -- grad modes -------------------------------------------------------------------------------------

TQT = QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec())
QAT = Config(QuantizationConfig(weight=TQT, input_tensors=TQT))
GRAD_MODES = {"inference_mode": torch.inference_mode, "no_grad": torch.no_grad}


@pytest.mark.parametrize("mode", GRAD_MODES)
def test_quantizing_under_a_grad_mode_gives_the_same_model_and_it_trains(mode):
    reference = quantize(mlp(), batches(), QAT)
    with GRAD_MODES[mode]():
        qmodel = quantize(mlp(), batches(), QAT)
    assert not any(t.is_inference() for t in [*qmodel.parameters(), *qmodel.buffers()])
    x = torch.randn(4, 12)
    assert torch.equal(qmodel(x), reference(x))
    qmodel.train()
    qmodel(x).square().mean().backward()  # a QAT step
    learned = [p for name, p in qmodel.named_parameters() if "scaling_impl" in name]
    assert learned and all(p.grad is not None for p in [*learned, qmodel[0].weight])


@pytest.mark.parametrize("mode", GRAD_MODES)
def test_a_quantized_model_runs_and_exports_under_a_grad_mode(mode, onnx_path):
    qmodel = quantize(mlp(), batches())
    x = torch.randn(4, 12)
    expected = qmodel(x)
    with GRAD_MODES[mode]():
        assert torch.equal(qmodel(x), expected)
        assert ModelExporter(onnx_path).export_onnx_model(qmodel, x).passed


# -- torch.compile ----------------------------------------------------------------------------------

#: dynamo breaks the graph at Brevitas' QuantTensor.signed (a .item()). "eager" checks dynamo's
#: tracing (about 30 s on 2 loaded cores); "aot_eager" (AOT autograd, as for training) and
#: "inductor" (compiles C++, minutes) are opt-in: QUARK_TEST_COMPILE=1
OPT_IN = pytest.mark.skipif(not os.environ.get("QUARK_TEST_COMPILE"), reason="opt-in: QUARK_TEST_COMPILE=1")
BACKENDS = ["eager", pytest.param("aot_eager", marks=OPT_IN), pytest.param("inductor", marks=OPT_IN)]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile_gives_the_eager_outputs(backend):
    torch._dynamo.reset()
    qmodel = quantize(mlp(), batches())
    x = torch.randn(4, 12)
    with torch.no_grad():
        expected = qmodel(x)
        compiled = torch.compile(qmodel, backend=backend)
        assert torch.equal(compiled(x), expected)
        assert torch.equal(compiled(2 * x), qmodel(2 * x))  # the compiled graph reruns on new data
