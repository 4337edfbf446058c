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
from quark.torch.quantization.config.spec import Role

BEFORE, CALIBRATED, LAST = Phase.before_quantization, Phase.after_calibration, Phase.after_quantization


def _no_a2q(check=None):
    """The precondition of an algorithm that rounds weights itself through Brevitas' GPxQ (GPTQ, GPFQ,
    GPFA2Q, Qronos), beside its own ``check``: no accumulator-aware weights (``A2QSpec``). Brevitas'
    GPxQ refuses weight quantizers that need the layer's quantized input ("GPTQ does not support
    weight quantizers that require quantized inputs"), which A2Q's do."""

    def checked(config, plans, sites) -> list[str]:
        a2q = [p.name for p in plans if p.specs[Role.weight] is not None and p.specs[Role.weight].accumulator_bits is not None]
        found = []
        if a2q:
            found.append(
                f"{type(config).__name__} with accumulator-aware weights (qat_spec=A2QSpec) in modules {a2q[:5]}"
                f"{' ...' if len(a2q) > 5 else ''}; allowed: A2QSpec weights without it (QAT keeps their bound), or "
                "GPFA2Q on plain integer weights (accumulator-aware PTQ) (Brevitas' GPxQ rounds weight quantizers "
                "that need no quantized input only)"
            )
        return found + (list(check(config, plans, sites)) if check is not None else [])

    return checked


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
    GPTQConfig: Implementation(CALIBRATED, gptq.gptq_config, needs_data=True, check=_no_a2q(gptq.check)),
    GPTQ: Implementation(CALIBRATED, gptq.gptq_extension, needs_data=True, check=_no_a2q()),
    GPFQ: Implementation(CALIBRATED, gpfq.gpfq, needs_data=True, check=_no_a2q()),
    GPFA2Q: Implementation(CALIBRATED, gpfq.gpfa2q, needs_data=True, check=_no_a2q(gpfq.check_a2q)),
    Qronos: Implementation(CALIBRATED, gpfq.qronos, needs_data=True, check=_no_a2q()),
    QronosConfig: Implementation(
        CALIBRATED, gpfq.qronos_config, needs_data=True, check=_no_a2q(gpfq.check_qronos_config)
    ),
    # last
    BiasCorrection: Implementation(
        LAST, corrections.bias_correction, needs_data=True, shape=corrections.add_biases, folded_batch_norm=True
    ),
    CalibrateBatchNorm: Implementation(LAST, corrections.calibrate_batch_norm, needs_data=True),
}

#: the table, the runs after quantization calibrating an uncalibrated model first
IMPLEMENTATIONS: dict[type[AlgoConfig], Implementation] = {
    cls: impl if impl.phase is BEFORE else replace(impl, run=calibrate_first(impl.run)) for cls, impl in _TABLE.items()
}
