"""Brevitas extension: run Quark configs on Brevitas (PTQ, QAT, export).

``config`` and ``algos`` import without Brevitas; ``api`` needs it.
"""

from quark.torch.quantization.config.algorithms import add_backend

__all__ = ["ModelExporter", "ModelQuantizer"]

# The Brevitas implementations of the algorithm configs, imported when one is first run.
add_backend("quark.torch.extensions.brevitas._backend.algorithms")


def __getattr__(name):  # lazy, so that `import ...brevitas.config` works without Brevitas
    if name in __all__:
        from quark.torch.extensions.brevitas import api

        return getattr(api, name)
    raise AttributeError(name)
