"""The FINN target's build steps: FINN builder steps ``(model, cfg) -> model`` in one registry.

Each step takes a qonnx ``ModelWrapper`` and either the package's :class:`~.build_config.FinnBuildConfig`
or FINN's own ``DataflowBuildConfig`` (read through ``FinnBuildConfig.of``), so the same functions run
in the package's runner (:mod:`.runner`) and in FINN's ``build_dataflow_cfg``, beside FINN's steps::

    from finn.builder.build_dataflow_config import DataflowBuildConfig
    from quark.torch.extensions.brevitas import finn_steps
    cfg = DataflowBuildConfig(steps=[*finn_steps.FRONT_END, "step_specialize_layers", ...], ...)

A step hands FINN the model as :class:`~.sweeps.FinnModelWrapper` (the package's linear-time
equivalents of qonnx's whole-graph passes and FINN's one-rewrite passes swept), and the steps of the
front end check the graph against the build's verification files after they run (:mod:`.checks`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from quark.torch.extensions.brevitas._backend.targets.finn import checks, front_end
from quark.torch.extensions.brevitas._backend.targets.finn.build_config import FinnBuildConfig
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnConfigError, FinnError

logger = logging.getLogger(__name__)

#: a build step: FINN builder's signature
BuildStep = Callable[[Any, Any], Any]

#: step name -> step, in the order they were registered (the order of a build)
STEPS: dict[str, BuildStep] = {}


def register(*, checked: bool):
    """Register ``function(model, settings) -> model`` as the build step of its name (a second step of
    the same name is refused). The registered step takes FINN's or the package's config, runs the
    function on a :class:`~.sweeps.FinnModelWrapper`, names itself in any failure and, ``checked``,
    checks the graph after it (:func:`~.checks.check_step`)."""

    def decorate(function: Callable[[Any, FinnBuildConfig], Any]) -> BuildStep:
        name = function.__name__
        if name in STEPS:
            raise ValueError(f"a build step named {name!r} is registered already")

        @functools.wraps(function)
        def step(model, cfg):
            from quark.torch.extensions.brevitas._backend.targets.finn.sweeps import FinnModelWrapper

            settings = FinnBuildConfig.of(cfg)
            start = time.perf_counter()
            try:
                model = function(FinnModelWrapper.of(model), settings)
            except (FinnError, FinnConfigError):
                raise
            except Exception as failure:
                source = model.get_metadata_prop(checks.SOURCE) or "the model"
                raise FinnError(f"FINN step '{name}' failed on {source}: {type(failure).__name__}: {failure}") from failure
            seconds = time.perf_counter() - start
            if checked:
                checks.check_step(model, settings, name, seconds, baseline=name == FIRST)
            else:
                checks.record(model, checks.StepCheck(name, None, checks.op_types(model), seconds))
            return model

        STEPS[name] = step
        return step

    return decorate


@register(checked=True)
def step_quark_prepare(model, cfg: FinnBuildConfig):
    """A QONNX file as FINN's steps take it: checked to hold only standard ONNX and QONNX's ops (before
    anything of it is executed), one input and one output, its nodes tagged with their torch modules,
    qonnx's cleanup, batch size 1, shapes and datatypes inferred."""
    return front_end.prepare(model)


@register(checked=True)
def step_quark_qonnx_to_finn(model, cfg: FinnBuildConfig):
    """FINN's ``step_qonnx_to_finn`` and ``step_tidy_up``: Quant nodes become MultiThreshold nodes and
    integer weights (activation quantizers up to ``max_multithreshold_bit_width`` bits)."""
    return front_end.to_finn(model, cfg.max_multithreshold_bit_width)


@register(checked=True)
def step_quark_absorb_clips(model, cfg: FinnBuildConfig):
    """The clips of ReLU6 / Hardtanh folded into the thresholds they feed (FINN has no hardware for Clip)."""
    return front_end.absorb_clips(model)


@register(checked=True)
def step_quark_streamline(model, cfg: FinnBuildConfig):
    """FINN's ``step_streamline`` with the passes of its residual examples (forks, joins, concatenations),
    grouped and depthwise convolutions, one-pixel kernels and integer average pools."""
    return front_end.streamline(model)


@register(checked=True)
def step_quark_accumulating_pools(model, cfg: FinnBuildConfig):
    """Global average pools as FINN's ``GlobalAccPool`` (the integer sum) and a scale streamlined away."""
    return front_end.accumulating_pools(model)


@register(checked=True)
def step_quark_top_k(model, cfg: FinnBuildConfig):
    """With ``top_k``: the graph ends in the k best classes (FINN's ``InsertTopK``, the output's scale
    and bias absorbed into it); without, nothing."""
    return front_end.top_k(model, cfg.top_k) if cfg.top_k else model


@register(checked=True)
def step_quark_convert_to_hw(model, cfg: FinnBuildConfig):
    """FINN's ``step_convert_to_hw``; a node left outside the hardware is refused with its torch module
    and the change that maps it."""
    return front_end.convert_to_hw(model)


@register(checked=False)
def step_quark_create_dataflow_partition(model, cfg: FinnBuildConfig):
    """FINN's ``step_create_dataflow_partition``: the hardware layers cut into one partition, which the
    step returns; its parent graph (the host's nodes around it) is saved where FINN's builder saves it
    (``<output_dir>/intermediate_models/dataflow_parent.onnx``), for FINN's verification and the
    package's. Every node outside the hardware is refused first, named with its module and fix."""
    return front_end.create_dataflow_partition(model, cfg.intermediate_models_directory())


@register(checked=False)
def step_quark_specialize_layers(model, cfg: FinnBuildConfig):
    """FINN's ``step_specialize_layers``: each layer an HLS or RTL implementation for the part."""
    return front_end.specialize_layers(model, cfg.fpga_part)


@register(checked=False)
def step_quark_set_folding(model, cfg: FinnBuildConfig):
    """FINN's ``step_target_fps_parallelization`` (SetFolding for ``target_fps`` at ``clock_mhz``) then
    ``step_apply_folding_config`` (``folding``'s entries, attribute by attribute, on top)."""
    return front_end.set_folding(model, cfg)


@register(checked=False)
def step_quark_minimize_bit_width(model, cfg: FinnBuildConfig):
    """FINN's ``step_minimize_bit_width``: weights and accumulators as narrow as their values allow."""
    return front_end.minimize_bit_width(model)


@register(checked=False)
def step_quark_transpose_decomposition(model, cfg: FinnBuildConfig):
    """FINN's ``step_transpose_decomposition`` (after folding): each Shuffle as the InnerShuffle /
    OuterShuffle layers FINN builds and estimates."""
    return front_end.transpose_decomposition(model, cfg.fpga_part)


#: the package's front end: from a QONNX file to FINN's hardware layers, every step checked; what a
#: FINN user puts in ``DataflowBuildConfig.steps`` before FINN's ``step_create_dataflow_partition``
FRONT_END: tuple[str, ...] = (
    "step_quark_prepare",
    "step_quark_qonnx_to_finn",
    "step_quark_absorb_clips",
    "step_quark_streamline",
    "step_quark_accumulating_pools",
    "step_quark_top_k",
    "step_quark_convert_to_hw",
)
#: the package's build: the front end, the partition, specialization, folding and bit widths (what
#: FINN's estimates read); code generation and synthesis are FINN's steps (with Vivado)
DEFAULT_STEPS: tuple[str, ...] = tuple(STEPS)
#: the build's first step, whose graph the others are compared with
FIRST = FRONT_END[0]
#: the steps of the hand-off: a streamlined graph of thresholds and integer weights
HANDOFF: tuple[str, ...] = FRONT_END[:4]


def step_names(cfg: FinnBuildConfig) -> tuple[str, ...]:
    """``cfg``'s steps (:data:`DEFAULT_STEPS` when it names none) from ``start_step`` to ``stop_step``,
    each a registered step; a name that is none, or a start after the stop, is a ``FinnConfigError``."""
    names = DEFAULT_STEPS if cfg.steps is None else cfg.steps
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        raise FinnConfigError(f"steps: unknown step(s) {unknown}; the package's steps: {list(STEPS)}")
    for field in ("start_step", "stop_step"):
        value = getattr(cfg, field)
        if value is not None and value not in names:
            raise FinnConfigError(f"{field}={value!r}: not a step of this build; its steps: {list(names)}")
    first = names.index(cfg.start_step) if cfg.start_step else 0
    last = names.index(cfg.stop_step) if cfg.stop_step else len(names) - 1
    if first > last:
        raise FinnConfigError(f"start_step={cfg.start_step!r} comes after stop_step={cfg.stop_step!r}")
    return tuple(names[first : last + 1])
