"""Algorithm configs: pure data, registered by name, run by whichever backend implements them.

- :mod:`.registry`: the base classes (``AlgoConfig``, ``PreQuantOptConfig``), the phases, the
  name registry (``ALGO_CONFIGS``) and the implementations backends provide;
- :mod:`.fields`: the field checks the configs share;
- :mod:`.quark`: AMD Quark's main-API configs (SmoothQuant, AWQ, GPTQ);
- :mod:`.quark013`: AMD Quark 0.13's newer configs (RotationConfig, QronosConfig, ...; those no
  backend runs are refused by name when used);
- :mod:`.extension`: AMD Quark's Brevitas extension's algorithms, and those added from Brevitas.
"""

from quark.torch.quantization.config.algorithms.extension import (
    GPFA2Q,
    GPFQ,
    GPTQ,
    ActivationEqualization,
    BiasCorrection,
    CalibrateBatchNorm,
    HadamardRotation,
    MergeBatchNorm,
    Preprocess,
    Qronos,
)
from quark.torch.quantization.config.algorithms.quark import AWQConfig, GPTQConfig, SmoothQuantConfig
from quark.torch.quantization.config.algorithms.quark013 import (
    QUARK013_ALGORITHMS,
    AutoRoundConfig,
    AutoSmoothQuantConfig,
    GPTAQConfig,
    OnlineRotationConfig,
    QronosConfig,
    RotationConfig,
    SVDQuantConfig,
)
from quark.torch.quantization.config.algorithms.registry import (
    ALGO_CONFIGS,
    AlgoConfig,
    Implementation,
    Phase,
    PreQuantOptConfig,
    add_backend,
    algo_from_dict,
    algo_list,
    implementation_of,
    implementations,
    register_algo_config,
    register_implementation,
)

__all__ = [
    "ALGO_CONFIGS",
    "GPFA2Q",
    "GPFQ",
    "GPTQ",
    "QUARK013_ALGORITHMS",
    "AWQConfig",
    "ActivationEqualization",
    "AlgoConfig",
    "AutoRoundConfig",
    "AutoSmoothQuantConfig",
    "BiasCorrection",
    "CalibrateBatchNorm",
    "GPTAQConfig",
    "GPTQConfig",
    "HadamardRotation",
    "Implementation",
    "MergeBatchNorm",
    "OnlineRotationConfig",
    "Phase",
    "PreQuantOptConfig",
    "Preprocess",
    "Qronos",
    "QronosConfig",
    "RotationConfig",
    "SVDQuantConfig",
    "SmoothQuantConfig",
    "add_backend",
    "algo_from_dict",
    "algo_list",
    "implementation_of",
    "implementations",
    "register_algo_config",
    "register_implementation",
]

#: the algorithms of this package, loadable by name
ALGO_CONFIGS.update(
    {
        cls.name: cls
        for cls in (
            SmoothQuantConfig,
            AWQConfig,
            GPTQConfig,
            Preprocess,
            MergeBatchNorm,
            ActivationEqualization,
            HadamardRotation,
            GPTQ,
            GPFQ,
            GPFA2Q,
            Qronos,
            BiasCorrection,
            CalibrateBatchNorm,
            *QUARK013_ALGORITHMS,
        )
    }
)
