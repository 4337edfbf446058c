"""Quantization-aware training helpers for models returned by ``ModelQuantizer``.

The quantized model trains in any ordinary PyTorch loop; these helpers cover the rest (see
:mod:`quark.torch.extensions.brevitas._backend.qat` for the details):

- :func:`freeze`: end of training; fixes every quantization parameter, outputs unchanged.
- :func:`uncalibrated_quantizers`: static activation quantizers neither calibrated nor loaded.
- :func:`load_float_weights`: copy a float model's weights into the quantized model.
- :func:`freeze_batch_norm`: stop the statistics of the batch norms folded into their layers during
  QAT (``TQTSpec.fold_batch_norm``) from updating, now.
"""

from quark.torch.extensions.brevitas._backend.qat import (
    freeze,
    freeze_batch_norm,
    load_float_weights,
    uncalibrated_quantizers,
)

__all__ = ["freeze", "freeze_batch_norm", "load_float_weights", "uncalibrated_quantizers"]
