"""Brevitas extension: run Quark configs on Brevitas (PTQ, QAT, export).

``config`` and ``algos`` import without Brevitas; ``api`` needs it.
"""

__all__ = ["ModelQuantizer", "ModelExporter"]


def __getattr__(name):  # lazy, so that `import ...brevitas.config` works without Brevitas
    if name in __all__:
        from quark.torch.extensions.brevitas import api

        return getattr(api, name)
    raise AttributeError(name)
