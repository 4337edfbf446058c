"""Brevitas export handlers and managers, adjusted where our quantizers need it.

Brevitas' handlers read a quantizer's scale, zero point and bit width from its proxy, which our
custom blocks (``QuarkIntScaling``, ``Pof2Scale``, ``CastScale``) feed correctly: they only change
how the scale is computed. Three things do not survive unchanged, measured with brevitas 0.13.4:

- **Rounding** (QONNX). A proxy reports ``float_to_int_impl_type`` of the stock quantizer it was
  built from (always ``ROUND``), not the ``float_to_int_impl`` we plug in, so activations and
  biases with ``RoundType.floor`` were exported as ``ROUND``. The handlers below take the rounding
  from the normalised spec each injector carries (``quark_spec``) through :data:`QONNX_ROUNDING`.
- **Weights** (QONNX). The Quant node of a weight re-quantizes the float weight with ``ROUND``;
  weights rounded otherwise came out different. The handler feeds the weight as torch quantized it
  (already on the grid, so re-quantizing is exact) instead.
- **Per-group weights** (both formats). Brevitas ships no handler for
  ``GroupwiseWeightQuantProxyFromInjector``. QONNX: one Quant node on the grouped view, whose
  scale broadcasts. QCDQ: integer weights reshaped to (groups, group elements) and dequantized per
  axis 0 (a 1-D scale, valid from opset 13), then reshaped back.
- **Frozen weight quantizers**. GPTQ / GPFQ freeze a layer's weight statistics by giving its proxy
  a subclass (``algorithms/frozen.py``); Brevitas looks handlers up by the proxy's exact class, so
  these proxies had none and the export failed (``'NoneType' object is not callable``). The
  managers below look a frozen proxy up by the Brevitas class it extends.

The managers are Brevitas' with these handlers first in their ``handlers`` list (Brevitas picks
the first handler whose ``handled_layer`` is exactly the proxy's class).
"""

from __future__ import annotations

from copy import copy

import torch
from brevitas.core.function_wrapper import FloorSte, Identity, RoundSte, TensorClamp
from brevitas.core.quant.int_base import IntQuant
from brevitas.export.common.handler.base import ClipMixin
from brevitas.export.onnx.handler import ONNXBaseHandler
from brevitas.export.onnx.qonnx.function import (
    BrevitasQuantDynamoFn,
    BrevitasQuantOp,
    BrevitasQuantTorchScriptFn,
)
from brevitas.export.onnx.qonnx.handler import (
    BrevitasActQuantProxyHandler,
    BrevitasBiasQuantProxyHandler,
    BrevitasWeightQuantProxyHandler,
)
from brevitas.export.onnx.qonnx.manager import QONNXDynamoManager, QONNXManager
from brevitas.export.onnx.standard.function import DequantizeLinearOp, IntClipOp
from brevitas.export.onnx.standard.qcdq.manager import StdQCDQONNXDynamoManager, StdQCDQONNXManager
from brevitas.proxy.groupwise_int_parameter_quant import GroupwiseWeightQuantProxyFromInjector
from brevitas.quant.solver.common import solve_float_to_int_impl_from_enum
from torch import Tensor

from quark.torch.extensions.brevitas._backend.algorithms.frozen import FrozenProxyMixin
from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.inventory import spec_of
from quark.torch.extensions.brevitas._backend.quantizers import RoundHalfAwayFromZeroSte
from quark.torch.quantization.config.type import RoundType

#: RoundType -> QONNX ``rounding_mode`` (qonnx ``resolve_rounding_mode``: ROUND is numpy's
#: half-even ``np.round``, FLOOR ``np.floor``, HALF_UP ``sign(x) * floor(|x| + 0.5)``, i.e. ties
#: away from zero, which is ``RoundType.round``). QONNX has no mode for ``RoundType.half_up``
#: (floor(x + 0.5)) on negative values: it is HALF_UP on an argument made non-negative (below).
QONNX_ROUNDING: dict[RoundType, str] = {
    RoundType.half_even: "ROUND",
    RoundType.floor: "FLOOR",
    RoundType.round: "HALF_UP",
    RoundType.half_up: "HALF_UP",
}
#: QONNX rounding_mode -> the rounding qonnx executes for it
_ROUND_IMPL_OF_MODE = {"ROUND": RoundSte, "FLOOR": FloorSte, "HALF_UP": RoundHalfAwayFromZeroSte}


def _by_data_ptr(table: dict[int, Tensor], x: Tensor) -> Tensor:
    try:
        return table.get(x.data_ptr(), x)
    except RuntimeError:  # fake tensors under torch.export have no storage
        return x


class _QuantTorchScriptFn(BrevitasQuantTorchScriptFn):
    """Brevitas' QONNX ``Quant`` with eager numerics for every mode of :data:`QONNX_ROUNDING`
    (Brevitas' own resolves only its enum names, not ``HALF_UP``); same ONNX node."""

    @staticmethod
    def forward(ctx, x, scale, zero_point, bit_width, narrow_range, signed, rounding_mode):
        impl = _ROUND_IMPL_OF_MODE.get(rounding_mode) or solve_float_to_int_impl_from_enum(rounding_mode)
        quant = IntQuant(
            float_to_int_impl=impl(),
            tensor_clamp_impl=TensorClamp(),
            input_view_impl=Identity(),
            narrow_range=torch.tensor(int(narrow_range), dtype=x.dtype, device=x.device),
            signed=torch.tensor(int(signed), dtype=x.dtype, device=x.device),
        )
        return quant(scale, zero_point, bit_width, x)


class QuantOp:
    torchscript = _QuantTorchScriptFn
    dynamo = BrevitasQuantDynamoFn


class _SpecRounding:
    """Take ``rounding_mode`` from the proxy's Quark spec instead of its stale injector field.

    A signed ``RoundType.half_up`` quantizer (FINN's rounding) has no QONNX mode. It is written
    on the integer grid: q = Quant(x / s + 2^(b-1); scale 1, unsigned, HALF_UP), y = (q - 2^(b-1)) s.
    The argument of the rounding is non-negative, where HALF_UP is floor(. + 0.5), and
    [0, 2^b - 1] shifted by -2^(b-1) is the signed range. FINN absorbs the Div and Add before the
    Quant into its thresholds and the shift after it into the MultiThreshold's output bias: the
    same integer node as a signed Quant.
    """

    half_up_signed = False

    def prepare_for_export(self, module):
        super().prepare_for_export(module)
        spec = spec_of(module)
        self.half_up_signed = False
        if module.is_quant_enabled and spec is not None:
            self.symbolic_kwargs["rounding_mode"] = QONNX_ROUNDING[spec.round_method]
            if self.quant_op is BrevitasQuantOp:
                self.quant_op = QuantOp
            self.half_up_signed = spec.round_method is RoundType.half_up and bool(self.symbolic_kwargs.get("signed"))

    def _quant(self, x: Tensor, scale: Tensor, zero_point: Tensor, bit_width: Tensor, **attrs) -> Tensor:
        """The Quant node(s) of ``x``; ``attrs``: narrow_range, signed, rounding_mode."""
        if not self.half_up_signed:
            return self.export_op(self.quant_op, x, scale, zero_point, bit_width, *attrs.values())
        half = 2.0 ** (bit_width - 1)
        unsigned = {**attrs, "signed": False}
        q = self.export_op(self.quant_op, x / scale + half, torch.ones_like(scale), zero_point, bit_width, *unsigned.values())
        return (q - half) * scale


class QONNXActHandler(_SpecRounding, BrevitasActQuantProxyHandler):
    def symbolic_execution(self, x: Tensor):
        kwargs = dict(self.symbolic_kwargs)
        scale, zero_point, bit_width = kwargs.pop("scale"), kwargs.pop("zero_point"), kwargs.pop("bit_width")
        return self._quant(x, scale, zero_point, bit_width, **kwargs), scale, zero_point, bit_width


class QONNXBiasHandler(_SpecRounding, BrevitasBiasQuantProxyHandler):
    def symbolic_execution(self, x: Tensor, input_scale=None, input_bit_width=None):
        kwargs = copy(self.symbolic_kwargs)  # the proxy may be shared
        scale, bit_width, zero_point = kwargs.pop("scale"), kwargs.pop("bit_width"), kwargs.pop("zero_point")
        scale = input_scale if scale is None else scale
        bit_width = input_bit_width if bit_width is None else bit_width
        if scale is None or bit_width is None:
            raise RuntimeError("bias export needs the input scale and bit width of its layer")
        return self._quant(x, scale, zero_point, bit_width, **kwargs), scale, zero_point, bit_width


class QONNXWeightHandler(BrevitasWeightQuantProxyHandler):
    """Quant node on the weight as torch quantized it (Brevitas collects it but feeds the float one)."""

    def symbolic_execution(self, x: Tensor):
        return super().symbolic_execution(_by_data_ptr(self.quant_weight_values, x))


class QONNXGroupwiseWeightHandler(BrevitasWeightQuantProxyHandler):
    """One Quant node on the grouped view (..., groups, group elements, ...); the scale broadcasts."""

    handled_layer = GroupwiseWeightQuantProxyFromInjector

    def prepare_for_export(self, module):
        if not module.is_quant_enabled:
            return
        quant = {tm.weight.data_ptr(): tm.quant_weight() for tm in module.tracked_module_list}
        first = next(iter(quant.values()))
        self.grouped_values = {ptr: qw.value_ for ptr, qw in quant.items()}
        self.symbolic_kwargs = {
            "scale": first.scale_,
            "zero_point": first.zero_point_,
            "bit_width": first.bit_width,
            "narrow_range": module.is_narrow_range,
            "signed": first.signed,
            "rounding_mode": "ROUND",  # values are on the grid already
        }
        self.quant_op = BrevitasQuantOp

    def symbolic_execution(self, x: Tensor):
        return super().symbolic_execution(self.grouped_values[x.data_ptr()])


class QCDQGroupwiseWeightHandler(ClipMixin, ONNXBaseHandler):
    """Integer weights as (groups, group elements), DequantizeLinear on axis 0, reshaped back."""

    handled_layer = GroupwiseWeightQuantProxyFromInjector

    def prepare_for_export(self, module):
        if not module.is_quant_enabled:
            self.symbolic_kwargs = None
            return
        quant = {tm.weight.data_ptr(): tm.quant_weight() for tm in module.tracked_module_list}
        first = next(iter(quant.values()))
        element_dim = module.group_dim + 1 if module.group_dim >= 0 else module.group_dim
        rank = first.value_.dim()
        element_dim %= rank
        self.perm = [d for d in range(rank) if d != element_dim] + [element_dim]
        self.inverse = [self.perm.index(d) for d in range(rank)]
        self.permuted_shape = [first.value_.shape[d] for d in self.perm]
        int_dtype = torch.int8 if first.signed else torch.uint8
        self.int_weights = {
            ptr: self._rows(torch.round(qw.value_ / qw.scale_ + qw.zero_point_), first.value_.shape).to(
                int_dtype
            )
            for ptr, qw in quant.items()
        }
        scale = first.scale_.expand(first.value_.shape)
        zero_point = first.zero_point_.expand(first.value_.shape)
        self.scale_rows = self._rows(scale, first.value_.shape)[:, 0].contiguous()
        self.zero_point_rows = self._rows(zero_point, first.value_.shape)[:, 0].to(int_dtype).contiguous()
        self.clip = self.int_clip_symbolic_kwargs(module.is_narrow_range, first.signed, first.bit_width)
        self.symbolic_kwargs = {
            "scale": first.scale_,
            "zero_point": first.zero_point_,
            "bit_width": first.bit_width,
        }

    def _rows(self, t: Tensor, shape: torch.Size) -> Tensor:
        return t.expand(shape).permute(self.perm).reshape(-1, self.permuted_shape[-1])

    def symbolic_execution(self, x: Tensor):
        q = self.int_weights[x.data_ptr()]
        if self.clip is not None:
            q = self.export_op(IntClipOp, q, *self.clip.values())
        y = self.export_op(DequantizeLinearOp, q, self.scale_rows, self.zero_point_rows, 0)
        y = y.reshape(self.permuted_shape).permute(self.inverse)
        kw = self.symbolic_kwargs
        return y, kw["scale"], kw["zero_point"], kw["bit_width"]


class FrozenProxyLookup:
    """A manager mixin: a frozen proxy gets the handler of the Brevitas proxy class it extends."""

    @classmethod
    def handler_from_module(cls, module, no_inheritance=False):
        handler = super().handler_from_module(module, no_inheritance)
        if handler is None and isinstance(module, FrozenProxyMixin):
            base = next(c for c in type(module).__mro__ if not issubclass(c, FrozenProxyMixin))
            handled = (h for h in cls.handlers if base in _classes(h.handled_layer))
            handler = next(handled, None)
        return handler


def _classes(handled_layer) -> tuple[type, ...]:
    return handled_layer if isinstance(handled_layer, tuple) else (handled_layer,)


_QONNX_HANDLERS = [QONNXActHandler, QONNXBiasHandler, QONNXWeightHandler, QONNXGroupwiseWeightHandler]


class QONNXExportManager(FrozenProxyLookup, QONNXManager):
    handlers = [*_QONNX_HANDLERS, *QONNXManager.handlers]


class QONNXDynamoExportManager(FrozenProxyLookup, QONNXDynamoManager):
    handlers = [*_QONNX_HANDLERS, *QONNXDynamoManager.handlers]


class QCDQExportManager(FrozenProxyLookup, StdQCDQONNXManager):
    handlers = [QCDQGroupwiseWeightHandler, *StdQCDQONNXManager.handlers]


class QCDQDynamoExportManager(FrozenProxyLookup, StdQCDQONNXDynamoManager):
    handlers = [QCDQGroupwiseWeightHandler, *StdQCDQONNXDynamoManager.handlers]


#: (format, dynamo) -> Brevitas export manager
MANAGERS = {
    (ExportFormat.qonnx, False): QONNXExportManager,
    (ExportFormat.qonnx, True): QONNXDynamoExportManager,
    (ExportFormat.qcdq, False): QCDQExportManager,
    (ExportFormat.qcdq, True): QCDQDynamoExportManager,
}
