"""Brevitas extension: run Quark configs on Brevitas (PTQ, QAT, export).

``config``, ``algos`` and ``presets`` import without Brevitas; ``api`` needs it (and ONNX only
when exporting). Loading this package tells the config layer, explicitly and by module name, how
to read the extension's config (``normalise``: its normaliser and view, for the plan) and where its
Brevitas implementations of the algorithms are; both load on first use, so that importing the
package imports no torch (the command line answers ``--help`` at once).
"""

from quark.torch.quantization.config.algorithms import add_backend
from quark.torch.quantization.flavours import add_flavour

__all__ = ["ModelExporter", "ModelQuantizer"]

add_flavour("quark.torch.extensions.brevitas.normalise")
add_backend("quark.torch.extensions.brevitas._backend.algorithms")


def __getattr__(name):  # lazy, so that `import ...brevitas.config` works without Brevitas
    if name in __all__:
        from quark.torch.extensions.brevitas import api

        return getattr(api, name)
    raise AttributeError(name)
