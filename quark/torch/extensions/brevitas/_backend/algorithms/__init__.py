"""Brevitas implementations of the algorithm configs, each registered against its config class
with the phase it runs in (see :mod:`quark.torch.quantization.config.algorithms`).

Importing this package registers them all; a new algorithm is a module here with one
``@register_implementation(ConfigClass, Phase....)`` function.
"""

from quark.torch.extensions.brevitas._backend.algorithms import (  # noqa: F401
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
