"""FINN's dataflow back half: a QONNX file to one dataflow partition of hardware layers, folded
for an FPGA part and a target throughput, with FINN's resource and cycle estimates, and verified by
executing the hardware graph in Python.

The steps are FINN's own transformations in the order of FINN's builder steps
(``step_qonnx_to_finn``, ``step_tidy_up``, ``step_streamline``, ``step_convert_to_hw``,
``step_create_dataflow_partition``, ``step_specialize_layers``,
``step_target_fps_parallelization``, ``step_minimize_bit_width``,
``step_generate_estimate_reports``). They are called directly because
``finn.builder.build_dataflow_steps`` does not import without Vivado (it loads FINN's simulator
and pandas at import time); what this module adds is the verification after every step, the
residual/concat streamlining of FINN's ResNet example, the check that one partition holds every
compute node, and the report against the part's capacity.

Modules: ``steps`` (FINN's transformations), ``front_end`` (checked steps, refusals, the partition),
``estimate`` (fit and speed on a part), ``directory`` (the one call), ``parts`` (capacities),
``origins`` (which torch module a node came from).
"""

from quark.torch.extensions.brevitas._backend.export.finn_dataflow.directory import (
    DataflowExport,
    Verification,
    export_finn_dataflow,
    export_finn_dataflow_model,
)
from quark.torch.extensions.brevitas._backend.export.finn_dataflow.errors import FinnDataflowError
from quark.torch.extensions.brevitas._backend.export.finn_dataflow.estimate import (
    Estimate,
    LayerEstimate,
    fold_and_estimate,
)
from quark.torch.extensions.brevitas._backend.export.finn_dataflow.front_end import (
    Dataflow,
    StepCheck,
    dataflow_from_qonnx,
)
from quark.torch.extensions.brevitas._backend.export.finn_dataflow.origins import module_of
from quark.torch.extensions.brevitas._backend.export.finn_dataflow.parts import FpgaPart, resolve

__all__ = [
    "Dataflow",
    "DataflowExport",
    "Estimate",
    "FinnDataflowError",
    "FpgaPart",
    "LayerEstimate",
    "StepCheck",
    "Verification",
    "dataflow_from_qonnx",
    "export_finn_dataflow",
    "export_finn_dataflow_model",
    "fold_and_estimate",
    "module_of",
    "resolve",
]
