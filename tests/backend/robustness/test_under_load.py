"""Point 5 of issue 11: under load (quantizing).

Calibration statistics are running, not stored (no batch outlives its step;
``benchmarks/calibration_memory.py`` measures the process's peak memory; the observers' state:
``tests/config/robustness/``); the package quantizes under ``torch.inference_mode`` and
``torch.no_grad`` (exports under them: ``tests/export/robustness/``); a quantized model runs under
``torch.compile`` with outputs equal to eager.
"""

from __future__ import annotations

import gc
import os
import weakref

import pytest
import torch
from _shared.configs import W8A8_IO
from _shared.models import batches, mlp
from _shared.quantize import quantize

from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, ScaleType, TQTThresholdInitMeth
from quark.torch.quantization.observer import (
    OBSERVERS,
)

ALL_STATISTICS = Config(
    QuantizationConfig(weight=W8A8_IO.global_quant_config.weight),
    layer_quant_config={
        "0": QuantizationConfig(input_tensors=QuantizationSpec(dtype=Dtype.int8, observer_cls=OBSERVERS["PerTensorPercentileObserver"])),
        "2": QuantizationConfig(
            input_tensors=QuantizationSpec(dtype=Dtype.uint8, symmetric=False, observer_cls=OBSERVERS["PerTensorMSEObserver"]),
            output_tensors=QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._LL_J)),
        ),
    },
)


@pytest.mark.slow  # a full garbage collection per batch: ~4 s
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

    qmodel = quantize(ALL_STATISTICS, mlp(seed=0), generate())
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
    reference = quantize(QAT, mlp(seed=0), batches(3))
    with GRAD_MODES[mode]():
        qmodel = quantize(QAT, mlp(seed=0), batches(3))
    assert not any(t.is_inference() for t in [*qmodel.parameters(), *qmodel.buffers()])
    x = torch.randn(4, 12)
    assert torch.equal(qmodel(x), reference(x))
    qmodel.train()
    qmodel(x).square().mean().backward()  # a QAT step
    learned = [p for name, p in qmodel.named_parameters() if "scaling_impl" in name]
    assert learned and all(p.grad is not None for p in [*learned, qmodel[0].weight])


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
    qmodel = quantize(W8A8_IO, mlp(seed=0), batches(3))
    x = torch.randn(4, 12)
    with torch.no_grad():
        expected = qmodel(x)
        compiled = torch.compile(qmodel, backend=backend)
        assert torch.equal(compiled(x), expected)
        assert torch.equal(compiled(2 * x), qmodel(2 * x))  # the compiled graph reruns on new data
