"""``Preprocess``: Brevitas' ``preprocess_for_quantize`` on the float model."""

from __future__ import annotations

import warnings
from typing import Any

from brevitas.graph.quantize import preprocess_for_quantize
from torch import nn

from quark.torch.quantization.config.algorithms import Preprocess


def preprocess(config: Preprocess, model: nn.Module, batches: Any = None) -> nn.Module:
    try:
        with warnings.catch_warnings():  # torch.fx internals deprecations, not actionable by users
            warnings.simplefilter("ignore", FutureWarning)
            return preprocess_for_quantize(
                model,
                trace_model=config.trace_model,
                relu6_to_relu=False,
                equalize_iters=config.equalize_iterations,
                equalize_merge_bias=config.equalize_merge_bias,
                merge_bn=config.merge_batch_norm,
                channel_splitting_ratio=config.channel_splitting_ratio,
                channel_splitting_split_input=config.channel_splitting_split_input,
            )
    except Exception as err:  # torch.fx raises many types; add what the user can do about it
        raise RuntimeError(
            f"Preprocess could not prepare {type(model).__name__}: {err}. Pass Config(..., "
            "pre_quant_opt_config=[MergeBatchNorm()]) to fold its batch norm where torch.fx traces it (part by "
            "part), or pre_quant_opt_config=[] to quantize without pre-processing."
        ) from err
