"""AMD Quark 0.13's newer algorithm configs, by its names, fields and defaults (as in
``quark.torch.quantization.config.config`` of the amd/Quark sources): ``RotationConfig`` (with
``OnlineRotationConfig``), ``QronosConfig``, ``GPTAQConfig``, ``AutoSmoothQuantConfig``,
``SVDQuantConfig`` and ``AutoRoundConfig``.

Where Brevitas 0.13.4 has the algorithm, the config runs on it (``_backend/algorithms``): Qronos, and
the online Hadamard rotations of ``RotationConfig`` (R1 with ``online_r1_rotation=True``, R4). What no
backend here runs is refused by name when the config is used (``ModelQuantizer(config)`` or
``apply``), with the reason and what to use instead: ``refused`` for a whole config,
``unsupported_values`` for a field's value. The configs themselves build, compare and serialise
as Quark's. Pure data; docs/quark013.md lists every name and what happens to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from quark.torch.quantization.config._fields import Serialisable, check_type
from quark.torch.quantization.config.algorithms.fields import (
    BOOL,
    MODULE_NAMES,
    MODULE_PATH,
    POSITIVE_INT,
    SCALING_LAYERS,
    Check,
    checked,
    is_a,
    required,
    str_list,
)
from quark.torch.quantization.config.algorithms.registry import AlgoConfig, PreQuantOptConfig

#: the groups of RotationConfig.scaling_layers and the keys of their entries
ROTATION_GROUPS = ("first_layer", "middle_layers", "last_layer")
ROTATION_ENTRY_KEYS = {"prev_modules": list, "norm_module": str, "next_modules": list, "target_modules": list}


def _rotation_scaling_layers(value: Any) -> bool:
    if not isinstance(value, dict) or set(value) - set(ROTATION_GROUPS):
        return False
    for entries in value.values():
        if not isinstance(entries, list):
            return False
        for entry in entries:
            if not isinstance(entry, dict) or set(entry) - set(ROTATION_ENTRY_KEYS):
                return False
            for key, kind in ROTATION_ENTRY_KEYS.items():
                if key in entry and not (
                    isinstance(entry[key], str) if kind is str else str_list(entry[key]) or entry[key] == []
                ):
                    return False
    return True


ROTATION_SCALING_LAYERS: Check = (
    _rotation_scaling_layers,
    (
        f"a dict of {list(ROTATION_GROUPS)} -> lists of dicts with keys {sorted(ROTATION_ENTRY_KEYS)} (module paths, "
        "'layer_id' / 'pre_layer_id' standing for a decoder layer's index)"
    ),
)


@dataclass(eq=True)
class OnlineRotationConfig(Serialisable):
    """Quark's settings of online rotations. ``shared_parallel``: one rotation shared by parallel
    layers (a Hadamard rotation is the same matrix for all: either value gives the same numbers);
    ``online_rotation_layers`` is not supported (must stay None)."""

    shared_parallel: bool
    online_rotation_layers: list[str] | None = None

    def __post_init__(self) -> None:
        check_type("OnlineRotationConfig", "shared_parallel", self.shared_parallel, bool, optional=False)


def _none_or_false(value: Any) -> bool:
    return value is None or value is False


@dataclass(eq=True)
class RotationConfig(PreQuantOptConfig):
    """Quark's rotations (SpinQuant's R1 - R4). Here: online Hadamard rotations, Brevitas'
    ``LayerwiseActivationRotation`` (as :class:`HadamardRotation`), runs before quantization
    wherever the config is listed:

    - R1 with ``online_r1_rotation=True``: in front of every Linear that ``scaling_layers`` names as
      ``target_modules`` (else ``next_modules``), with ``layer_id`` / ``pre_layer_id`` replaced by each
      decoder layer's index under ``model_decoder_layers`` (``first_layer``: layer 0, ``middle_layers``:
      1 .. n-1, ``last_layer``: the last);
    - R4: in front of ``<model_decoder_layers>.<i>.<mlp>.down_proj`` of every decoder layer.

    Refused when used, with the reason: R1 fused offline (``online_r1_rotation`` False, the default),
    R2, R3, ``rotation_size``, random rotations, training (``trainable``, ``train_smooth``,
    ``smooth_positions``) and ``online_config.online_rotation_layers``. ``backbone``, ``v_proj``,
    ``o_proj`` and ``self_attn`` only locate what R2 and offline R1 rotate: accepted, unused.
    """

    scaling_layers: dict[str, list[dict[str, Any]]] = required(ROTATION_SCALING_LAYERS)
    name: str = field(default="rotation", kw_only=True)  # keyword-only: the base's name comes first
    r1: bool = checked(True, BOOL)
    r2: bool = checked(False, BOOL)
    r3: bool = checked(False, BOOL)
    r4: bool = checked(False, BOOL)
    rotation_size: int | None = checked(
        None, (is_a(int, optional=True, test=lambda v: v > 0), "None or a positive int")
    )
    random_r1: bool = checked(False, BOOL)
    random_r2: bool = checked(False, BOOL)
    backbone: str = "model"
    model_decoder_layers: str = checked("model.layers", (is_a(str, test=bool), "a module path (str)"))
    v_proj: str = "self_attn.v_proj"
    o_proj: str = "self_attn.o_proj"
    self_attn: str = "self_attn"
    mlp: str = checked("mlp", (is_a(str, test=bool), "a module path relative to a decoder layer (str)"))
    online_r1_rotation: bool | None = checked(None, (is_a(bool, optional=True), "None or a bool"))
    online_config: OnlineRotationConfig | None = None
    trainable: bool = checked(False, BOOL)
    train_smooth: bool | None = checked(None, (is_a(bool, optional=True), "None or a bool"))
    smooth_positions: list[str] | None = checked(
        None,
        (
            lambda v: v is None or (isinstance(v, list) and set(v) <= {"r1", "r2", "r4"}),
            "None or a list of 'r1', 'r2', 'r4'",
        ),
    )

    unsupported_values: ClassVar[dict[str, Check]] = {
        "r2": (
            lambda v: v is False,
            "False (R2, fused into v_proj / o_proj per attention head, is not mapped onto Brevitas)",
        ),
        "r3": (lambda v: v is False, "False (R3 rotates the KV cache, which this package does not quantize)"),
        "rotation_size": (
            lambda v: v is None,
            "None (block rotations of rotation_size are not mapped onto Brevitas)",
        ),
        "random_r1": (lambda v: v is False, "False (random Hadamard rotations are not mapped)"),
        "random_r2": (lambda v: v is False, "False (random Hadamard rotations are not mapped)"),
        "trainable": (
            lambda v: v is False,
            "False (trained rotations, SpinQuant's Cayley optimisation, are not mapped)",
        ),
        "train_smooth": (_none_or_false, "None or False (trained smoothing scales are not mapped)"),
        "smooth_positions": (
            lambda v: v in (None, []),
            "None or [] (trained smoothing scales are not mapped)",
        ),
        "online_config": (
            lambda v: v is None or v.online_rotation_layers is None,
            "None or OnlineRotationConfig(online_rotation_layers=None) (its layer list is not supported)",
        ),
    }

    def __post_init__(self) -> None:
        if isinstance(self.online_config, dict):
            self.online_config = OnlineRotationConfig(**self.online_config)
        super().__post_init__()
        if not self.r1 and self.online_r1_rotation is not None:  # as Quark
            raise ValueError(
                f"RotationConfig.online_r1_rotation={self.online_r1_rotation!r} has no effect with r1=False; allowed: None"
            )
        if self.r1 and self.online_r1_rotation is None:  # Quark's default: R1 fused offline
            self.online_r1_rotation = False

    def unsupported(self) -> list[str]:
        problems = super().unsupported()
        if self.r1 and not self.online_r1_rotation:
            problems.append(
                "RotationConfig.online_r1_rotation=False (with r1=True) is not supported; allowed: True (R1 fused "
                "offline into the embeddings, norms and residual-stream layers needs a pre-norm RMSNorm decoder and is "
                "not mapped; online R1 is an online Hadamard rotation in front of scaling_layers' target_modules), or "
                "r1=False"
            )
        if not (self.r1 or self.r4):
            problems.append(
                "RotationConfig rotates nothing here: r1=False and r4=False; allowed: r1=True or r4=True"
            )
        return problems


def _static_groups_for_desc_act(config: QronosConfig | GPTAQConfig) -> None:
    """As Quark: ``desc_act=True`` needs ``static_groups=True``."""
    if config.desc_act and not config.static_groups:
        raise ValueError(
            f"{type(config).__name__}.desc_act=True with static_groups=False is not supported; allowed: static_groups=True"
        )


@dataclass(eq=True)
class QronosConfig(AlgoConfig):
    """Qronos (Zhang et al. 2025) as Quark configures it, on Brevitas' ``Qronos``, block by block:

    Args:
        inside_layer_modules: the layers to run on, relative to each block (wildcards allowed).
        model_decoder_layers: path of the blocks' ``ModuleList``.
        block_size: columns updated together.
        desc_act: quantize columns in order of decreasing activation energy.
        static_groups: per_group weights keep the groups' statistics of the original weights (True);
            False is refused (here, and by Quark with ``desc_act=True``).
        alpha: dampening of the input covariance, relative to its largest eigenvalue.
        beta: the stabilisation factor of Brevitas' Cholesky step.
    """

    inside_layer_modules: list[str] = required(MODULE_NAMES)
    model_decoder_layers: str = required(MODULE_PATH)
    name: str = field(default="qronos", kw_only=True)  # keyword-only: the base's name comes first
    block_size: int = checked(128, POSITIVE_INT)
    desc_act: bool = checked(True, BOOL)
    static_groups: bool = checked(True, BOOL)
    alpha: float = checked(1e-3, (is_a((int, float), test=lambda v: 0 < v < 1), "a number in (0, 1)"))
    beta: float = checked(1e4, (is_a((int, float), test=lambda v: v > 0), "a positive number"))

    unsupported_values: ClassVar[dict[str, Check]] = {
        "static_groups": (
            lambda v: v is True,
            "True (groups recomputed as columns are rounded are not mapped for Qronos)",
        ),
    }

    def __post_init__(self) -> None:
        self.model_decoder_layers = self.model_decoder_layers or None
        self.inside_layer_modules = self.inside_layer_modules or None
        super().__post_init__()
        _static_groups_for_desc_act(self)


@dataclass(eq=True)
class GPTAQConfig(AlgoConfig):
    """GPTAQ (GPTQ with asymmetric calibration, Li et al. 2025), Quark's fields. Refused: Brevitas
    0.13.4 has no GPTAQ."""

    name: str = "gptaq"
    block_size: int = 128
    damp_percent: float = 0.01
    alpha: float = 0.25
    desc_act: bool = True
    static_groups: bool = True
    inside_layer_modules: list[str] = field(default_factory=list)
    model_decoder_layers: str = field(default_factory=str)

    refused: ClassVar[str | None] = (
        "Brevitas 0.13.4 has no GPTAQ; use QronosConfig (it also corrects the error that the inputs quantized "
        "by earlier layers bring), GPTQConfig, or the extension's GPFQ"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _static_groups_for_desc_act(self)


@dataclass(eq=True)
class AutoSmoothQuantConfig(PreQuantOptConfig):
    """AutoSmoothQuant (SmoothQuant's alpha searched per layer by output error), Quark's fields.
    Refused: Brevitas has no such search."""

    name: str = "autosmoothquant"
    scaling_layers: list[dict[str, Any]] | None = checked(None, SCALING_LAYERS)
    model_decoder_layers: str | None = None
    compute_scale_loss: str | None = checked(
        "MSE", (lambda v: v in (None, "MSE", "MAE"), "None, 'MSE' or 'MAE'")
    )

    refused: ClassVar[str | None] = (
        "a per-layer search of SmoothQuant's alpha has no Brevitas counterpart; use SmoothQuantConfig(alpha=...) "
        "(one alpha, Brevitas' activation equalization) or AWQConfig (which searches its scales per layer group)"
    )


@dataclass(eq=True)
class SVDQuantConfig(AlgoConfig):
    """SVDQuant (a low-rank float branch absorbing each layer's quantization error, after smoothing),
    Quark's fields. Refused: see ``refused``."""

    name: str = "svdquant"
    svd_rank: int = 32
    smooth_alpha: float = 0.5
    search_alpha: bool = True
    alpha_candidates: list[float] | None = None
    alpha_search_max_samples: int = 8
    exclude_patterns: list[str] = field(
        default_factory=lambda: ["time_embedding", "add_time_proj", "conv_in", "conv_out", "time_proj"]
    )
    min_layer_size: int = 256
    use_gptq: bool = False
    gptq_n_bits: int = 4
    gptq_symmetric: bool = True
    gptq_group_size: int = -1
    gptq_blocksize: int = 128
    gptq_percdamp: float = 0.01
    gptq_actorder: bool = False

    refused: ClassVar[str | None] = (
        "Brevitas 0.13.4 keeps its SVDQuant in the examples package (brevitas_examples.common.svd_quant: the low-rank "
        "branch without SVDQuant's smoothing or its alpha search), which this package does not map; use "
        "SmoothQuantConfig with GPTQConfig, or HadamardRotation with GPTQConfig (measured on MiniLM, docs/algorithms.md)"
    )


class AutoRoundConfig(AlgoConfig):
    """AMD Quark's AutoRound config (SignRound: rounding and ranges learned by signed gradient
    descent, block by block). Refused: the amd/Quark sources this package follows define no
    ``AutoRoundConfig`` whose fields could be mapped, so any keyword fields are accepted and kept
    (for ``to_dict``), and using it raises with what to use instead."""

    name: ClassVar[str] = "autoround"
    refused: ClassVar[str | None] = (
        "its fields are not in the amd/Quark sources this package follows, so they cannot be mapped onto Brevitas' "
        "learned rounding (brevitas_examples.common.learned_round); use GPTQConfig or QronosConfig (error-correcting "
        "rounding, measured on MiniLM in docs/algorithms.md)"
    )

    def __init__(self, name: str = "autoround", **fields: Any) -> None:
        if name != "autoround":
            raise ValueError(f"AutoRoundConfig.name={name!r}: allowed ['autoround']")
        self.fields = fields

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.fields == self.fields  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"AutoRoundConfig({', '.join(f'{k}={v!r}' for k, v in self.fields.items())})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": "autoround", **self.fields}


#: Quark 0.13's newer algorithm configs, in the order docs/quark013.md lists them
QUARK013_ALGORITHMS: tuple[type[AlgoConfig], ...] = (
    RotationConfig,
    QronosConfig,
    GPTAQConfig,
    AutoSmoothQuantConfig,
    SVDQuantConfig,
    AutoRoundConfig,
)
