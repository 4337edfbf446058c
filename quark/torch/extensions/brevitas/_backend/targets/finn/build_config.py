"""The settings of a FINN build, as one frozen, serialisable object (FINN's ``DataflowBuildConfig``
is the model): :class:`FinnBuildConfig`, and the per-layer folding it carries, :class:`Folding`.

The package's build steps (:mod:`.steps`) read them; so do the exporter, the command line, the width
search and the ``build.py`` written into a dataflow directory. A FINN ``DataflowBuildConfig`` given to
a step instead (the step running inside FINN's own builder) is read through :meth:`FinnBuildConfig.of`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnConfigError

#: FINN's default ``mvau_wwidth_max``: SetFolding keeps SIMD x weight bits at most this
MVAU_WWIDTH_MAX = 36
#: FINN's default ``max_multithreshold_bit_width``: wider activation quantizers are not made thresholds
MAX_MULTITHRESHOLD_BITS = 8
#: relative tolerance of each step against the reference, over max(1, max|reference|) (FINN folds scales,
#: biases and batch norm into thresholds in float arithmetic)
STEP_RTOL = 1e-5

#: the folding attributes FINN's ``ApplyConfig`` sets and its folding files hold (FINN's builder's list)
FOLDING_ATTRIBUTES = (
    "PE",
    "SIMD",
    "EmbFold",
    "SeqFold",
    "parallel_window",
    "ram_style",
    "ram_style_thresholds",
    "ram_style_mask",
    "depth",
    "impl_style",
    "resType",
    "mac_resource",
    "mem_mode",
    "runtime_writeable_weights",
    "depth_trigger_uram",
    "depth_trigger_bram",
    "inFIFODepths",  # FINN's FIFO files' attribute; the package sets it where a branch must hold a frame
)


@dataclass(frozen=True)
class Folding:
    """Per-layer folding: layer name (as ``estimate.md`` and FINN's folding files name it after
    specialization: ``MVAU_hls_0``, ``Thresholding_rtl_1``) -> attributes (``{"PE": 2, "SIMD": 9}``).
    An entry sets only the attributes it names: the rest keep what FINN's SetFolding (or the
    defaults) gave them. FINN's ``folding_config.json`` format reads and writes as it is."""

    layers: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    @classmethod
    def of(cls, value: Folding | Mapping[str, Mapping[str, Any]] | str | os.PathLike | None) -> Folding:
        """A folding from a mapping, FINN's folding file (path) or ``None`` (no entries)."""
        if value is None or isinstance(value, Folding):
            return value or cls()
        if isinstance(value, (str, os.PathLike)):
            path = Path(value)
            try:
                value = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as error:
                raise FinnConfigError(f"folding={os.fspath(path)!r}: not a readable folding file ({error})") from error
        if not isinstance(value, Mapping):
            raise FinnConfigError(
                f"folding={value!r}: expected a mapping of layer name -> attributes, FINN's folding_config.json or None"
            )
        layers = []
        for name, attributes in value.items():
            if name == "Defaults":  # FINN's files carry defaults for every layer: none here
                continue
            if not isinstance(attributes, Mapping):
                raise FinnConfigError(f"folding[{name!r}]={attributes!r}: expected attributes, e.g. {{'PE': 2}}")
            unknown = sorted(set(attributes) - set(FOLDING_ATTRIBUTES))
            if unknown:
                raise FinnConfigError(
                    f"folding[{name!r}]: unknown attribute(s) {unknown}; FINN's folding attributes: {list(FOLDING_ATTRIBUTES)}"
                )
            layers.append((str(name), tuple(sorted(attributes.items()))))
        return cls(tuple(layers))

    def __bool__(self) -> bool:
        return bool(self.layers)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: dict(attributes) for name, attributes in self.layers}

    def merged(self, other: Folding) -> Folding:
        """This folding with ``other``'s entries on top (attribute by attribute)."""
        combined = self.to_dict()
        for name, attributes in other.to_dict().items():
            combined.setdefault(name, {}).update(attributes)
        return Folding.of(combined)

    def apply(self, model) -> None:
        """Set each entry's attributes on the layer of that name in ``model`` (a qonnx ``ModelWrapper``
        of the specialized partition); a name the partition lacks is an error naming its layers."""
        from qonnx.custom_op.registry import getCustomOp

        nodes = {node.name: node for node in model.graph.node}
        unknown = sorted(name for name, _ in self.layers if name not in nodes)
        if unknown:
            raise FinnConfigError(
                f"folding: no layer {unknown} in the dataflow partition; its layers (as estimate.md names them): "
                f"{sorted(nodes)}"
            )
        for name, attributes in self.layers:
            op = getCustomOp(nodes[name])
            for attribute, value in attributes:
                op.set_nodeattr(attribute, value)


def _positive(name: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise FinnConfigError(f"{name}={value!r}: expected a number > 0{' or None' if allow_none else ''}")


@dataclass(frozen=True)
class FinnBuildConfig:
    """Everything a FINN build of the package takes.

    Args:
        part: the FPGA part or a board FINN knows (``"Pynq-Z1"``, ``"ZCU104"``, ``"xczu3eg-sbva484-1-e"``).
        clock_mhz: the clock the layers are folded and estimated for.
        target_fps: frames per second to fold for (FINN's SetFolding); ``None``: every layer at
            PE = SIMD = 1, unless ``folding`` says otherwise.
        folding: per-layer folding set on top of SetFolding's (:class:`Folding`; a mapping or FINN's
            folding file are accepted).
        mvau_wwidth_max: SetFolding's bound on SIMD x weight bits of a matrix-vector layer.
        max_multithreshold_bit_width: the widest activation quantizer FINN's conversion makes thresholds.
        integer_input: the accelerator takes the integers of the network input's quantizer (FINN's
            usual interface; the host feeds ``round(x / scale)``) instead of floats it thresholds.
        top_k: end the dataflow with a top-k label select (the graph's output: the k best classes).
        steps: the build's steps by name (:data:`~.steps.STEPS`), in order; None: the package's
            :data:`~.steps.DEFAULT_STEPS`.
        start_step, stop_step: run from / up to (including) these steps only; a start step reads the
            model the step before it saved (``save_intermediate_models``).
        save_intermediate_models: save the model after each step to ``<output_dir>/intermediate_models``.
        output_dir: where the steps write (partitions, intermediate models, reports).
        verify_input_npy, verify_expected_output_npy: inputs and the torch model's outputs on them;
            each step of the package checks the graph against them (FINN's ``verify_steps`` read the same).
        rtol: what a step's outputs may differ from the expected ones by, relative to max(1, max|expected|),
            beyond what the QONNX graph itself differs by.
    """

    part: str = "xc7z020clg400-1"
    clock_mhz: float = 100.0
    target_fps: float | None = None
    folding: Folding = field(default_factory=Folding)
    mvau_wwidth_max: int = MVAU_WWIDTH_MAX
    max_multithreshold_bit_width: int = MAX_MULTITHRESHOLD_BITS
    integer_input: bool = False
    top_k: int | None = None
    steps: tuple[str, ...] | None = None
    start_step: str | None = None
    stop_step: str | None = None
    save_intermediate_models: bool = False
    output_dir: str | None = None
    verify_input_npy: str | None = None
    verify_expected_output_npy: str | None = None
    rtol: float = STEP_RTOL

    def __post_init__(self) -> None:
        from quark.torch.extensions.brevitas._backend.targets.finn.parts import resolve

        try:
            resolve(self.part)
        except ValueError as error:
            raise FinnConfigError(str(error)) from None
        _positive("clock_mhz", self.clock_mhz)
        _positive("target_fps", self.target_fps, allow_none=True)
        for name in ("mvau_wwidth_max", "max_multithreshold_bit_width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise FinnConfigError(f"{name}={value!r}: expected an integer >= 1")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise FinnConfigError(f"top_k={self.top_k!r}: expected an integer >= 1 or None")
        _positive("rtol", self.rtol)
        object.__setattr__(self, "folding", Folding.of(self.folding))
        if self.steps is not None:
            object.__setattr__(self, "steps", tuple(self.steps))

    # -- what the steps read ------------------------------------------------------------------------

    @property
    def fpga_part(self) -> str:
        """The part ``part`` names (a board resolved to its part)."""
        from quark.torch.extensions.brevitas._backend.targets.finn.parts import resolve

        return resolve(self.part).part

    def intermediate_models_directory(self) -> Path:
        """Where the steps put intermediate models and partitions (as FINN's builder)."""
        if self.output_dir is None:
            raise FinnConfigError("output_dir=None: the build writes partitions and models; give a directory")
        return Path(self.output_dir) / "intermediate_models"

    # -- serialisation ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["folding"] = self.folding.to_dict()
        data["steps"] = None if self.steps is None else list(self.steps)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FinnBuildConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise FinnConfigError(f"FinnBuildConfig: unknown field(s) {unknown}; its fields: {sorted(known)}")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> FinnBuildConfig:
        return cls.from_dict(json.loads(text))

    def replace(self, **changes: Any) -> FinnBuildConfig:
        return replace(self, **changes)

    @classmethod
    def of(cls, cfg: Any) -> FinnBuildConfig:
        """``cfg`` itself, or the settings of a FINN ``DataflowBuildConfig`` (a step of the package
        running in FINN's builder): its part, clock, target fps, folding file, bounds, output
        directory and verification files."""
        if isinstance(cfg, cls):
            return cfg
        part = getattr(cfg, "fpga_part", None) or getattr(cfg, "board", None)
        period = getattr(cfg, "synth_clk_period_ns", None)
        return cls(
            part=part or cls.part,
            clock_mhz=1e3 / period if period else cls.clock_mhz,
            target_fps=getattr(cfg, "target_fps", None),
            folding=Folding.of(getattr(cfg, "folding_config_file", None)),
            mvau_wwidth_max=getattr(cfg, "mvau_wwidth_max", MVAU_WWIDTH_MAX),
            max_multithreshold_bit_width=getattr(cfg, "max_multithreshold_bit_width", MAX_MULTITHRESHOLD_BITS),
            output_dir=getattr(cfg, "output_dir", None),
            steps=(),
            save_intermediate_models=bool(getattr(cfg, "save_intermediate_models", False)),
            verify_input_npy=getattr(cfg, "verify_input_npy", None),
            verify_expected_output_npy=getattr(cfg, "verify_expected_output_npy", None),
        )
