"""The optional packages an export needs, checked before anything is written: a missing one is one
``ImportError`` naming it and the extra that installs it (the config API and ``ModelQuantizer``
work without them)."""

from __future__ import annotations

from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat


def _missing_export_stack(fmt: ExportFormat) -> list[str]:
    missing = []
    try:
        import onnx  # noqa: F401
    except ImportError:
        missing.append("onnx")
    try:
        import onnxoptimizer  # noqa: F401  (Brevitas' export managers refuse to run without it)
    except ImportError:
        missing.append("onnxoptimizer")
    try:
        import onnxruntime  # noqa: F401  (runs QCDQ graphs, and qonnx's execution of QONNX graphs)
    except ImportError:
        missing.append("onnxruntime")
    if fmt is ExportFormat.qonnx:
        try:
            import qonnx  # noqa: F401
        except ImportError:
            missing.append("qonnx")
    return missing


def require_export_stack(fmt: ExportFormat) -> None:
    """Raise ``ImportError`` naming what a ``fmt`` export lacks, and how to install it."""
    missing = _missing_export_stack(fmt)
    if missing:
        raise ImportError(
            f"the {fmt.value} export needs {', '.join(missing)}, which is not installed: "
            "pip install 'quark-brevitas[export]' (onnx, onnxruntime, qonnx, onnxoptimizer at the tested versions)"
        )
