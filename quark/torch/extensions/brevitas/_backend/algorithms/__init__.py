"""Brevitas implementations of the algorithm configs: one table, config class -> how it runs
(:class:`~quark.torch.quantization.config.algorithms.Implementation`: phase, function, whether it
needs data, its precondition on the plan).

The config layer reads :data:`IMPLEMENTATIONS` when an algorithm is first looked up (the extension
announces this module with ``add_backend``). A new algorithm is a module here and one row below.

The algorithms that run on the quantized model calibrate its static activation quantizers first
where they were never calibrated (``calibrate_first``): AMD Quark's extension returns a model from
``quantize_model(model)`` without data, and its scripts then call ``GPTQ().apply(qmodel, loader)``.
"""

from dataclasses import replace

from quark.torch.extensions.brevitas._backend.algorithms import (
    awq,
    batch_norm,
    corrections,
    equalization,
    gpfq,
    gptq,
    preprocess,
    rotation,
    smoothquant,
)
from quark.torch.extensions.brevitas._backend.calibrate import calibrate_first
from quark.torch.quantization.config.algorithms import (
    GPFA2Q,
    GPFQ,
    GPTQ,
    ActivationEqualization,
    AlgoConfig,
    AWQConfig,
    BiasCorrection,
    CalibrateBatchNorm,
    GPTQConfig,
    HadamardRotation,
    Implementation,
    MergeBatchNorm,
    Phase,
    Preprocess,
    Qronos,
    QronosConfig,
    RotationConfig,
    SmoothQuantConfig,
)

BEFORE, CALIBRATED, LAST = Phase.before_quantization, Phase.after_calibration, Phase.after_quantization

_TABLE: dict[type[AlgoConfig], Implementation] = {
    # on the float model
    Preprocess: Implementation(BEFORE, preprocess.preprocess),
    MergeBatchNorm: Implementation(BEFORE, batch_norm.merge_batch_norm, structural=True),
    HadamardRotation: Implementation(BEFORE, rotation.hadamard_rotation),
    RotationConfig: Implementation(BEFORE, rotation.rotation_config),
    ActivationEqualization: Implementation(
        BEFORE, equalization.activation_equalization, needs_data=True, wants_plans=True
    ),
    SmoothQuantConfig: Implementation(BEFORE, smoothquant.smoothquant, needs_data=True),
    # on the calibrated model
    AWQConfig: Implementation(CALIBRATED, awq.awq, needs_data=True, check=awq.check),
    GPTQConfig: Implementation(CALIBRATED, gptq.gptq_config, needs_data=True, check=gptq.check),
    GPTQ: Implementation(CALIBRATED, gptq.gptq_extension, needs_data=True),
    GPFQ: Implementation(CALIBRATED, gpfq.gpfq, needs_data=True),
    GPFA2Q: Implementation(CALIBRATED, gpfq.gpfa2q, needs_data=True, check=gpfq.check_a2q),
    Qronos: Implementation(CALIBRATED, gpfq.qronos, needs_data=True),
    QronosConfig: Implementation(CALIBRATED, gpfq.qronos_config, needs_data=True, check=gpfq.check_qronos_config),
    # last
    BiasCorrection: Implementation(LAST, corrections.bias_correction, needs_data=True),
    CalibrateBatchNorm: Implementation(LAST, corrections.calibrate_batch_norm, needs_data=True),
}

#: the table, the runs after quantization calibrating an uncalibrated model first
IMPLEMENTATIONS: dict[type[AlgoConfig], Implementation] = {
    cls: impl if impl.phase is BEFORE else replace(impl, run=calibrate_first(impl.run)) for cls, impl in _TABLE.items()
}
