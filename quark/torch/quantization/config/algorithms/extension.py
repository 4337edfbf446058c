"""The algorithms of AMD Quark's Brevitas extension (``quark.torch.extensions.brevitas.algos``),
by its names, and those this package adds from Brevitas (``MergeBatchNorm``, ``HadamardRotation``,
``Qronos``). Pure data; the Brevitas implementations live in
``quark.torch.extensions.brevitas._backend.algorithms``."""

from __future__ import annotations

from dataclasses import dataclass, field

from quark.torch.quantization.config.algorithms.fields import (
    BOOL,
    FRACTION,
    NAME_PATTERNS,
    UNIT_INTERVAL,
    checked,
    is_a,
)
from quark.torch.quantization.config.algorithms.registry import AlgoConfig, PreQuantOptConfig


@dataclass(eq=True)
class Preprocess(PreQuantOptConfig):
    """Float-model preparation before quantization (Brevitas ``preprocess_for_quantize``).

    Traces the model with ``torch.fx``, turns functional calls into modules, merges batch norm into
    the preceding convolution, removes dropout, equalizes weights across layers
    (``equalize_iterations`` rounds) and optionally splits outlier channels. The function of the
    model is preserved (ReLU6 is kept: Brevitas' default replacement by ReLU would change it).

    A model that ``torch.fx`` cannot trace fails here with the tracer's message; pass
    ``Config(..., pre_quant_opt_config=[])`` to quantize it without pre-processing.
    """

    name: str = field(default="Pre-Processing", kw_only=True)
    trace_model: bool = True
    equalize_iterations: int = 20
    equalize_merge_bias: bool = True
    merge_batch_norm: bool = True
    channel_splitting_ratio: float = 0.0
    channel_splitting_split_input: bool = False


@dataclass(eq=True)
class MergeBatchNorm(PreQuantOptConfig):
    """Batch norm folded into the layer before it (Brevitas ``MergeBatchNorm``), beyond AMD Quark.

    What ``Preprocess`` does to batch norm, alone: a model without batch norm is returned as it
    is (no tracing, so any model passes); otherwise the model is traced with ``torch.fx`` (a model
    that does not trace whole, part by part: its largest submodules that do) and every
    ``BatchNorm`` that follows a Linear / Conv / ConvTranspose (whose output feeds nothing else) is
    folded into its weights and bias; the float function is unchanged. Batch norms in code
    ``torch.fx`` cannot trace (timm's ``BatchNormAct2d``, data-dependent ``forward``) are found by
    running one calibration batch when calibration data is given: each follows the layer whose
    output it alone takes, and the fold is kept only where the model's outputs are unchanged. A
    batch norm that cannot be folded (after an addition, or after a layer whose output forks)
    stays and is named in a warning. Integer targets need it: the XINT8 preset folds by default, as the NPU's compiler does.
    """

    name: str = field(default="Merge Batch Norm", kw_only=True)


@dataclass(eq=True)
class ActivationEqualization(PreQuantOptConfig):
    """SmoothQuant-style activation equalization (Brevitas ``activation_equalization_mode``) on the
    float model, from calibration data.

    Args:
        is_layerwise: True: a per-channel scale is inserted in front of every Linear / Conv and
            folded into its weight (any model); False: scales are folded into the preceding layer
            through the traced graph (needs the ``torch.fx`` model that ``Preprocess`` makes).
        alpha: migration strength in [0, 1].
    """

    name: str = field(default="Activation Equalization", kw_only=True)
    is_layerwise: bool = checked(True, BOOL)
    alpha: float = checked(0.5, UNIT_INTERVAL)


@dataclass(eq=True)
class HadamardRotation(PreQuantOptConfig):
    """Online Hadamard rotation in front of Linear layers (QuaRot-style; Brevitas
    ``LayerwiseActivationRotation``), beyond AMD Quark.

    Each chosen Linear computes ``(x H)(W H)^T = x W^T`` with H an orthonormal Hadamard matrix: the
    weight is rotated once (``W H``), the input at every call (``x H``, a float transform that stays
    in the quantized model, in front of the layer's input quantizer). Rotation spreads outlier
    channels of weights and activations over all channels, so per-tensor scales fit them better;
    the float function is unchanged. A rotated layer becomes the child ``layer`` of Brevitas'
    ``RotatedModule`` (``encoder.0.fc`` is quantized as ``encoder.0.fc.layer``: name patterns in
    ``layer_quant_config`` must match the new name; ``exclude`` of the old name still applies).

    Args:
        layers: name patterns (fnmatch) of the Linear layers to rotate; None: every Linear whose
            input width has a Hadamard matrix (a power of two times 1, 12, 20, 28, 36, 40, 52, 60,
            108, 140, 152, 156 or 172), the others named in a warning. A pattern matching no Linear,
            or a matched layer of another width, is an error.
    """

    name: str = field(default="Hadamard Rotation", kw_only=True)
    layers: list[str] | None = checked(None, NAME_PATTERNS)


@dataclass(eq=True)
class GPTQ(AlgoConfig):
    """GPTQ (Frantar et al.) with Brevitas' ``gptq_mode``, on the calibrated model.

    Args:
        act_order: quantize columns in order of decreasing activation energy.
    """

    name: str = field(default="GPTQ", kw_only=True)
    act_order: bool = checked(False, BOOL)


@dataclass(eq=True)
class GPFQ(AlgoConfig):
    """GPFQ (Lybrand and Saab; Zhang et al.) with Brevitas' memory-efficient ``gpfq_mode``.

    Args:
        act_order: quantize columns in order of decreasing activation energy.
        percentage_of_processed_inputs: fraction of each batch's input vectors (tokens, pixels)
            that enter the statistics, evenly spaced.
    """

    name: str = field(default="GPFQ", kw_only=True)
    act_order: bool = checked(False, BOOL)
    percentage_of_processed_inputs: float = checked(1.0, FRACTION)


@dataclass(eq=True)
class GPFA2Q(GPFQ):
    """GPFQ constrained so that no integer accumulator of ``accumulator_bit_width`` bits can overflow
    (A2Q, Colbert et al.), with Brevitas' accumulator-aware GPFQ.

    Args:
        act_order, percentage_of_processed_inputs: as in :class:`GPFQ`.
        accumulator_bit_width: bits of the signed accumulator of every quantized layer.
    """

    name: str = field(default="GPFA2Q", kw_only=True)
    accumulator_bit_width: int = checked(16, (is_a(int, test=lambda v: 2 <= v <= 64), "an int in 2..64"))


@dataclass(eq=True)
class Qronos(AlgoConfig):
    """Qronos (Zhang et al. 2025, Brevitas ``Qronos``), beyond AMD Quark: rounds each column to
    correct both the error of the weights already rounded and the error that quantized inputs
    (from the layers quantized before) bring, then diffuses the rest GPTQ-style.

    Args:
        act_order: quantize columns in order of decreasing activation energy.
        alpha: dampening of the input covariance, relative to its largest eigenvalue.
    """

    name: str = field(default="Qronos", kw_only=True)
    act_order: bool = checked(True, BOOL)
    alpha: float = checked(1e-6, (is_a((int, float), test=lambda v: 0 < v < 1), "a number in (0, 1)"))


@dataclass(eq=True)
class BiasCorrection(AlgoConfig):
    """Bias correction (Nagel et al. 2019, Brevitas ``bias_correction_mode``): each layer's bias
    absorbs the mean shift its quantization causes on the calibration data."""

    name: str = field(default="Bias Correction", kw_only=True)


@dataclass(eq=True)
class CalibrateBatchNorm(AlgoConfig):
    """Batch-norm statistics re-estimated on the quantized model (Brevitas ``norm_correction_mode``)."""

    name: str = field(default="Calibrate Batch Norm", kw_only=True)
