"""Everything that imports Brevitas. Fails on import with a clear message when Brevitas is
missing or is not the version this package is tested with."""

from importlib.metadata import PackageNotFoundError, version

TESTED_BREVITAS = "0.13.4"

try:
    _installed = version("brevitas")
except PackageNotFoundError:
    raise ImportError(
        f"quark.torch.extensions.brevitas needs Brevitas: pip install 'quark-brevitas[brevitas]' "
        f"(brevitas=={TESTED_BREVITAS})"
    ) from None
# Quantizer internals are used, which change between minor releases: accept the tested minor.
if _installed.split(".")[:2] != TESTED_BREVITAS.split(".")[:2]:
    raise ImportError(
        f"brevitas {_installed} is installed; quark.torch.extensions.brevitas supports brevitas "
        f"{'.'.join(TESTED_BREVITAS.split('.')[:2])}.x (tested: {TESTED_BREVITAS}): pip install brevitas=={TESTED_BREVITAS}"
    )

import warnings

# Brevitas warns at import about an absent optional CUDA kernel package and about its own
# internal use of brevitas.fx; neither is actionable by users, and importing this package must
# stay silent. Import those modules once here, with exactly these warnings filtered.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="fast_hadamard_transform package not found")
    warnings.filterwarnings("ignore", message="brevitas.fx is deprecated", category=DeprecationWarning)
    import brevitas.graph.base
    import brevitas.graph.equalize  # noqa: F401
