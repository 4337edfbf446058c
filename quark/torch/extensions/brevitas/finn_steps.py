"""The package's FINN build steps, for FINN's own builder and for the package's runner.

Each ``step_quark_*`` is a FINN builder step ``(model, cfg) -> model``: put them in a
``DataflowBuildConfig``'s ``steps`` (as functions, or as ``"quark.torch.extensions.brevitas.finn_steps.<name>"``)
beside FINN's own, and FINN's ``build_dataflow_cfg`` runs them with the package's exactness checks
and speed::

    from finn.builder.build_dataflow import build_dataflow_cfg
    from finn.builder.build_dataflow_config import DataflowBuildConfig
    from quark.torch.extensions.brevitas import finn_steps

    cfg = DataflowBuildConfig(
        output_dir="build", board="Pynq-Z1", synth_clk_period_ns=10.0, target_fps=10000,
        steps=[*finn_steps.FRONT_END, "step_create_dataflow_partition", "step_specialize_layers",
               "step_target_fps_parallelization", "step_apply_folding_config", "step_minimize_bit_width",
               "step_generate_estimate_reports"],
        verify_input_npy="input.npy", verify_expected_output_npy="expected_output.npy",
        generate_outputs=["estimate_reports"],
    )
    build_dataflow_cfg("model.qonnx.onnx", cfg)

With ``verify_input_npy`` / ``verify_expected_output_npy`` set (inputs and the torch model's outputs on
them), every checked step executes its graph on them and fails naming itself when it took the graph
further from torch than the QONNX file is. ``FinnBuildConfig`` holds the same settings for the
package's own runner (``ModelExporter.export_finn_dataflow``, ``quark-brevitas export --format finn``).
Needs finn-plus.
"""

from __future__ import annotations

from quark.torch.extensions.brevitas._backend.targets.finn import steps as _steps
from quark.torch.extensions.brevitas._backend.targets.finn.build_config import FinnBuildConfig, Folding
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnConfigError, FinnError
from quark.torch.extensions.brevitas._backend.targets.finn.runner import run
from quark.torch.extensions.brevitas._backend.targets.finn.steps import (
    DEFAULT_STEPS,
    STEPS,
    step_quark_absorb_clips,
    step_quark_accumulating_pools,
    step_quark_convert_to_hw,
    step_quark_create_dataflow_partition,
    step_quark_minimize_bit_width,
    step_quark_prepare,
    step_quark_qonnx_to_finn,
    step_quark_set_folding,
    step_quark_specialize_layers,
    step_quark_streamline,
    step_quark_top_k,
    step_quark_transpose_decomposition,
)

#: the package's front end, from a QONNX file to FINN's hardware layers, as step functions (what FINN's
#: builder takes before its ``step_create_dataflow_partition``, or the package's own partition step)
FRONT_END = tuple(STEPS[name] for name in _steps.FRONT_END)
#: the hand-off: to a streamlined graph of thresholds and integer weights
HANDOFF = tuple(STEPS[name] for name in _steps.HANDOFF)

__all__ = [
    "DEFAULT_STEPS",
    "FRONT_END",
    "HANDOFF",
    "STEPS",
    "FinnBuildConfig",
    "FinnConfigError",
    "FinnError",
    "Folding",
    "run",
    "step_quark_absorb_clips",
    "step_quark_accumulating_pools",
    "step_quark_convert_to_hw",
    "step_quark_create_dataflow_partition",
    "step_quark_minimize_bit_width",
    "step_quark_prepare",
    "step_quark_qonnx_to_finn",
    "step_quark_set_folding",
    "step_quark_specialize_layers",
    "step_quark_streamline",
    "step_quark_top_k",
    "step_quark_transpose_decomposition",
]
