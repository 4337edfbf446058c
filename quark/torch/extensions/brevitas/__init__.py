"""Brevitas extension: run Quark configs on Brevitas (PTQ, QAT, export).

``config``, ``algos`` and ``presets`` import without Brevitas; ``api`` needs it (and ONNX only
when exporting). Loading this package tells the config layer, explicitly, how to read the
extension's config (its normaliser and view, for the plan) and where its Brevitas
implementations of the algorithms are (loaded on first use).
"""

from quark.torch.extensions.brevitas import normalise
from quark.torch.quantization.config.algorithms import add_backend

__all__ = ["ModelExporter", "ModelQuantizer"]

normalise.register()
add_backend("quark.torch.extensions.brevitas._backend.algorithms")


def __getattr__(name):  # lazy, so that `import ...brevitas.config` works without Brevitas
    if name in __all__:
        from quark.torch.extensions.brevitas import api

        return getattr(api, name)
    raise AttributeError(name)
