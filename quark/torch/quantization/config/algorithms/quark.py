"""AMD Quark's main-API algorithm configs (``quark.torch.quantization.config.algorithms`` in Quark):
their names, fields and defaults, as Quark documents them. Pure data; the Brevitas implementations
live in ``quark.torch.extensions.brevitas._backend.algorithms``."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

from quark.torch.quantization.config.algorithms.fields import (
    BIT,
    BOOL,
    GROUP,
    HEADS,
    MODULE_NAMES,
    MODULE_PATH,
    POSITIVE,
    POSITIVE_INT,
    SCALING_LAYERS,
    SYM,
    UNIT_INTERVAL,
    checked,
    is_a,
)
from quark.torch.quantization.config.algorithms.registry import AlgoConfig, PreQuantOptConfig


@dataclass(eq=True)
class SmoothQuantConfig(PreQuantOptConfig):
    """SmoothQuant (Xiao et al. 2022): migrate activation outliers into the weights by per-channel scaling.

    For each pair ``prev_op -> layers`` (a norm or a linear layer feeding linear layers), the scale
    of input channel j is ``s_j = max|X_j|^alpha / max|W_:j|^(1 - alpha)``, clamped below at
    ``scale_clamp_min``; ``prev_op``'s output is divided by s and the layers' weights multiplied,
    so the float function is unchanged.

    Args:
        name: "smoothquant" (older files: "smooth").
        alpha: migration strength in [0, 1].
        scale_clamp_min: smallest scale.
        scaling_layers: Quark's list of ``{"prev_op": ..., "layers": [...], "inp": ...}`` relative
            to each block of ``model_decoder_layers`` (or to the model without it); None: found in
            the model (norm -> linear and linear -> linear pairs), pairs that cannot be found named
            in a warning.
        embedding_layers: modules run before the first block (checked to exist; the model runs
            them anyway to reach the blocks).
        model_decoder_layers: path of the blocks' ``ModuleList``; None: found in the model.
        num_attention_heads, num_key_value_heads: heads of grouped-query attention, needed to pair
            ``v_proj -> o_proj`` when they have different widths.
    """

    name: str = "smoothquant"
    alpha: float = checked(1.0, UNIT_INTERVAL)
    scale_clamp_min: float = checked(1e-3, POSITIVE)
    scaling_layers: list[dict[str, Any]] | None = checked(None, SCALING_LAYERS)
    embedding_layers: list[str] | None = checked(None, MODULE_NAMES)
    model_decoder_layers: str | None = checked(None, MODULE_PATH)
    num_attention_heads: int = checked(-1, HEADS)
    num_key_value_heads: int = checked(-1, HEADS)

    empty_as_none: ClassVar[tuple[str, ...]] = ("model_decoder_layers", "scaling_layers")


@dataclass(eq=True)
class AWQConfig(AlgoConfig):
    """AWQ (Lin et al. 2023): activation-aware weight scaling searched per layer group, then clipping.

    For each pair ``prev_op -> layers``, a grid of scales ``s = mean|X|^r`` (r in 0, 0.05, ..., 0.95)
    is tried on the layers' quantized weights and the one minimising the output error of the
    group (``module2inspect``, else the layers) is folded into ``prev_op`` and the weights; then
    each layer's weight range is shrunk (up to 50%) where that lowers its output error.

    Args:
        name: "awq".
        bit, sym, group_size: Quark's description of the weight quantization; the layer's weight
            spec is what quantizes, and these must agree with it (None: take the spec's; group_size
            -1: per channel).
        algo_processor: Quark's processor class; this backend runs its own implementation, so
            only None is meaningful (any other value is accepted and ignored with a warning).
        scaling_layers, model_decoder_layers, embedding_layers: as in :class:`SmoothQuantConfig`.
        num_attention_heads, num_key_value_heads: as in :class:`SmoothQuantConfig`.
    """

    name: str = "awq"
    bit: int | None = checked(4, BIT)
    sym: bool | None = checked(False, SYM)
    group_size: int | None = checked(128, GROUP)
    algo_processor: Any = None
    scaling_layers: list[dict[str, Any]] | None = checked(None, SCALING_LAYERS)
    model_decoder_layers: str | None = checked(None, MODULE_PATH)
    embedding_layers: list[str] | None = checked(None, MODULE_NAMES)
    num_attention_heads: int = checked(-1, HEADS)
    num_key_value_heads: int = checked(-1, HEADS)

    empty_as_none: ClassVar[tuple[str, ...]] = ("model_decoder_layers", "scaling_layers")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.algo_processor is not None:
            warnings.warn(
                f"AWQConfig.algo_processor={self.algo_processor!r} is ignored: this package runs its own AWQ on "
                "Brevitas quantizers",
                stacklevel=3,
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with its ``name``; ``Config.from_dict`` finds the class by that name."""
        data = super().to_dict()
        data["algo_processor"] = None  # a class does not serialise; it is ignored anyway
        return data


@dataclass(eq=True)
class GPTQConfig(AlgoConfig):
    """GPTQ (Frantar et al. 2022): second-order weight rounding with error feedback, layer by layer.

    Args:
        name: "gptq".
        bit, sym, group_size: must agree with each layer's weight spec (None: take the spec's;
            group_size -1: per channel).
        damp_percent: dampening of the Hessian's diagonal, as a fraction of its mean.
        desc_act: quantize columns in order of decreasing activation energy ("act order").
        static_groups: per_group weights: True fixes every group's scale from the original
            weights before GPTQ starts; False (Quark's documented default) computes a group's
            scale from the updated weights when GPTQ reaches its first column (as AutoGPTQ);
            with ``desc_act=True`` it is refused (groups in activation order are not the spec's
            contiguous groups; AMD Quark refuses it too). Per-channel and per-tensor scales are
            fixed from the original weights.
        true_sequential: True: each layer sees the inputs produced by the layers already
            quantized; False: the layers of one block are quantized in parallel on the block's
            float inputs.
        inside_layer_modules: the layers to run GPTQ on, relative to each block (wildcards
            allowed); None: every quantized Linear / Conv layer of the blocks.
        model_decoder_layers: path of the blocks' ``ModuleList``; None: found in the model (no
            repeated blocks: the whole model is one block).
        embedding_layers: modules run before the first block (checked to exist).
        block_size: columns updated together (the lazy batch update of the paper).
    """

    name: str = "gptq"
    bit: int | None = checked(4, BIT)
    sym: bool | None = checked(False, SYM)
    group_size: int | None = checked(128, GROUP)
    damp_percent: float = checked(0.01, (is_a((int, float), test=lambda v: 0 <= v < 1), "a number in [0, 1)"))
    desc_act: bool = checked(True, BOOL)
    static_groups: bool = checked(False, BOOL)
    true_sequential: bool = checked(True, BOOL)
    inside_layer_modules: list[str] | None = checked(None, MODULE_NAMES)
    model_decoder_layers: str | None = checked(None, MODULE_PATH)
    embedding_layers: list[str] | None = checked(None, MODULE_NAMES)
    block_size: int = checked(128, POSITIVE_INT)

    empty_as_none: ClassVar[tuple[str, ...]] = ("model_decoder_layers", "inside_layer_modules")
