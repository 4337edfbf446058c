"""Brevitas export handlers and managers, adjusted where our quantizers need it.

Brevitas' handlers read a quantizer's scale, zero point and bit width from its proxy, which our
custom blocks (``QuarkIntScaling``, ``Pof2Scale``, ``CastScale``) feed correctly: they only change
how the scale is computed. Three things do not survive unchanged, measured with brevitas 0.13.4:

- **Rounding** (QONNX). ``RoundType.toward_zero`` is QONNX's ``DOWN``. A proxy reports ``float_to_int_impl_type`` of the stock quantizer it was
  built from (always ``ROUND``), not the ``float_to_int_impl`` we plug in, so activations and
  biases with ``RoundType.floor`` were exported as ``ROUND``. The handlers below take the rounding
  from the normalised spec each injector carries (``quark_spec``) through :data:`QONNX_ROUNDING`;
  an activation quantizer whose rounding FINN's ``ConvertQONNXtoFINN`` would change (it ignores
  ``rounding_mode`` and rounds ties up) is written as exact thresholds, and signed
  ``RoundType.half_up`` wider than thresholds, which no QONNX mode rounds, as two Quants
  (:class:`_SpecRounding`).
- **Weights** (QONNX). The Quant node of a weight re-quantizes the float weight with ``ROUND``;
  weights rounded otherwise came out different. The handler feeds the weight as torch quantized it
  (already on the grid, so re-quantizing is exact) instead.
- **Per-group weights** (both formats). Brevitas ships no handler for
  ``GroupwiseWeightQuantProxyFromInjector``. QONNX: one Quant node on the grouped view, whose
  scale broadcasts. QCDQ: integer weights reshaped to (groups, group elements) and dequantized per
  axis 0 (a 1-D scale, valid from opset 13), then reshaped back.
- **16-bit activations** (QCDQ). Brevitas' QCDQ handlers stop at 8 bits ("Bit width 16 is not
  supported"; unsigned zero points above 8 bits are refused, signed ones become int32, which no
  QuantizeLinear takes). :class:`QCDQWideActHandler` writes 9..16-bit activation quantizers as
  QuantizeLinear / DequantizeLinear on int16 (unsigned ones with integers and zero point moved down
  by 2^15, the same values; a Clip below the full range, as Brevitas does below 8 bits); :func:`.qdq.wide_domain` then moves those nodes to the domain the opset needs (ONNX from opset
  21, ``com.microsoft`` before).
- **bfloat16 / float16 casts** (QCDQ). Brevitas' float handlers accept only OCP / FNUZ FP8
  ("Only OCP/FNUZ Standard are supported for FP8 export"). A cast quantizer is x -> Cast(x, to) ->
  Cast(float): :class:`QCDQCastActHandler`, :class:`QCDQCastWeightHandler` (the weight stored in
  the narrow type, cast up).
- **BFP16 blocks** (QCDQ). Brevitas has no handler for our block proxies (``'NoneType' object
  is not callable``). Weights: int8 codes as (blocks, 8) rows dequantized per row (the per-group
  layout above: one BFP16 block is one group). Activations: :class:`QCDQBlockActHandler` computes
  each block's shared exponent in the graph exactly as ``shared_microexponents._quantize`` does
  (a count of the powers of two at or below the block's maximum, no logarithm; a table of exact
  steps; one binade up where a code would pass 127), then QuantizeLinear / DequantizeLinear on int8
  with that per-block step (axis 0 of the (blocks, 8) view). MX6 / MX9 (two exponent levels) stay
  refused (support table).
- **Accumulator-aware weights** (``A2QSpec``). Our :class:`AccumulatorAwareWeightProxy` extends
  Brevitas' A2Q proxy; Brevitas looks handlers up by exact class, so it has its own QONNX handler
  (the weight as torch quantized it, rounded toward zero, as for every weight above; Brevitas'
  handler feeds the float weight with ROUND) and QCDQ handler (Brevitas' for the stock proxy).
- **Wide integer biases** (QCDQ). Brevitas recovers a bias's integers as value / scale in float32
  and refuses them ("QuantTensor not valid") when that is more than 0.2 from an integer: an int32
  bias of A16W8 near 3e6 on a 3e-8 grid is (float32's relative error times 3e6).
  :class:`QCDQBiasHandler` takes the integers DequantizeLinear maps back to the bias, from the
  float64 quotient where float32's misses (:func:`bias_integers`).
- **Frozen weight quantizers**. GPTQ / GPFQ freeze a layer's weight statistics by giving its proxy
  a subclass (``algorithms/frozen.py``); Brevitas looks handlers up by the proxy's exact class, so
  these proxies had none and the export failed (``'NoneType' object is not callable``). The
  managers below look a frozen proxy up by the Brevitas class it extends.

The managers are Brevitas' with these handlers first in their ``handlers`` list (Brevitas picks
the first handler whose ``handled_layer`` is exactly the proxy's class).
"""

from __future__ import annotations

from collections.abc import Callable
from copy import copy

import numpy as np
import torch
from brevitas.core.function_wrapper import FloorSte, Identity, RoundSte, RoundToZeroSte, TensorClamp
from brevitas.core.quant.int_base import IntQuant
from brevitas.export.common.handler.base import ClipMixin
from brevitas.export.onnx.function import DynamoFn
from brevitas.export.onnx.handler import ONNXBaseHandler
from brevitas.export.onnx.qonnx.function import (
    DOMAIN_STRING,
    DOMAIN_VERSION,
    BrevitasQuantDynamoFn,
    BrevitasQuantOp,
    BrevitasQuantTorchScriptFn,
)
from brevitas.export.onnx.qonnx.handler import (
    BrevitasActQuantProxyHandler,
    BrevitasBiasQuantProxyHandler,
    BrevitasDecoupledWeightQuantWithInputProxyHandler,
    BrevitasWeightQuantProxyHandler,
)
from brevitas.export.onnx.qonnx.manager import QONNXDynamoManager, QONNXManager
from brevitas.export.onnx.standard.function import CastOp, DequantizeLinearOp, IntClipOp, QuantizeLinearOp
from brevitas.export.onnx.standard.qcdq.handler import (
    StdCDQCastONNXBiasQuantProxyHandler,
    StdFloatQCDQCastONNXActQuantProxyHandler,
    StdFloatQCDQCastONNXWeightQuantProxyHandler,
    StdQCDQCastONNXActQuantProxyHandler,
    StdQCDQCastONNXDecoupledWeightQuantWithInputProxyHandler,
)
from brevitas.export.onnx.standard.qcdq.manager import StdQCDQONNXDynamoManager, StdQCDQONNXManager
from brevitas.proxy.groupwise_int_parameter_quant import GroupwiseWeightQuantProxyFromInjector
from brevitas.quant.solver.common import solve_float_to_int_impl_from_enum
from torch import Tensor

from quark.torch.extensions.brevitas._backend.algorithms.frozen import FrozenProxyMixin
from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.inventory import spec_of
from quark.torch.extensions.brevitas._backend.quantizers import (
    AccumulatorAwareWeightProxy,
    RoundHalfAwayFromZeroSte,
)
from quark.torch.extensions.brevitas._backend.shared_microexponents import (
    SharedMicroexponentActProxy,
    SharedMicroexponentWeightProxy,
    pow2,
)
from quark.torch.quantization.config.type import RoundType
from quark.torch.quantization.tensor_quant import Format

#: RoundType -> QONNX ``rounding_mode`` (qonnx ``resolve_rounding_mode``: ROUND is numpy's
#: half-even ``np.round``, FLOOR ``np.floor``, HALF_UP ``sign(x) * floor(|x| + 0.5)``, i.e. ties
#: away from zero, which is ``RoundType.round``; DOWN ``np.fix``, toward zero). QONNX has no mode for
#: ``RoundType.half_up`` (floor(x + 0.5)) on negative values: HALF_UP is it on an unsigned grid only;
#: a signed grid is written as thresholds (below).
QONNX_ROUNDING: dict[RoundType, str] = {
    RoundType.half_even: "ROUND",
    RoundType.floor: "FLOOR",
    RoundType.round: "HALF_UP",
    RoundType.half_up: "HALF_UP",
    RoundType.toward_zero: "DOWN",
}
#: Brevitas' rounding names (``float_to_int_impl_type`` of a stock quantizer, what its QONNX export
#: writes) -> RoundType; a quantizer rounding otherwise (CEIL, learned) is written as Brevitas writes it
BREVITAS_ROUNDING: dict[str, RoundType] = {
    "ROUND": RoundType.half_even,
    "FLOOR": RoundType.floor,
    "ROUND_TO_ZERO": RoundType.toward_zero,
}
#: QONNX rounding_mode -> the rounding qonnx executes for it
_ROUND_IMPL_OF_MODE = {"ROUND": RoundSte, "FLOOR": FloorSte, "HALF_UP": RoundHalfAwayFromZeroSte, "DOWN": RoundToZeroSte}


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


class _MultiThresholdTorchScriptFn(torch.autograd.Function):
    """qonnx's (and FINN's) ``MultiThreshold``: how many of ``thresholds`` (one global row, a tuple
    of floats) each value reaches (x >= t), plus ``out_bias``; exact comparisons. The thresholds are
    a ``Constant`` node, as the exporter writes Brevitas' scales: shape inference then gives them the
    value_info that qonnx's ``GiveUniqueTensorNames`` renames by (an initializer without one keeps
    its name, which FINN's next MultiThreshold node then also takes in ``GiveReadableTensorNames``).
    ``data_layout`` says channels first, as torch's tensors are: without it qonnx's
    ``InferDataLayouts`` leaves the output's layout unknown, and the nodes after it guess NHWC for
    4-D tensors, which FINN's conversion then writes into the next per-channel thresholds."""

    @staticmethod
    def symbolic(g, x, thresholds, out_bias, out_dtype, data_layout):
        values = g.op("Constant", value_t=torch.tensor([thresholds], dtype=torch.float32))
        ret = g.op(
            f"{DOMAIN_STRING}::MultiThreshold",
            x,
            values,
            out_bias_f=out_bias,
            out_dtype_s=out_dtype,
            data_layout_s=data_layout,
        )
        ret.setType(x.type())
        return ret

    @staticmethod
    def forward(ctx, x, thresholds, out_bias, out_dtype, data_layout):
        steps = torch.tensor(thresholds, dtype=x.dtype, device=x.device)
        return (x.unsqueeze(-1) >= steps).sum(-1).to(x.dtype) + out_bias


class _MultiThresholdDynamoFn(DynamoFn):
    @staticmethod
    def symbolic(x, thresholds, out_bias, out_dtype, data_layout):
        return torch.onnx.ops.symbolic(
            f"{DOMAIN_STRING}::MultiThreshold",
            (x, torch.tensor([thresholds], dtype=x.dtype, device=x.device)),
            {"out_bias": float(out_bias), "out_dtype": out_dtype, "data_layout": data_layout},
            dtype=x.dtype,
            shape=x.shape,
            version=DOMAIN_VERSION,
        )


class MultiThresholdOp:
    torchscript = _MultiThresholdTorchScriptFn
    dynamo = _MultiThresholdDynamoFn


#: FINN's default ``max_multithreshold_bit_width`` (its Quant nodes wider than this are not converted to
#: thresholds): the widest activation quantizer written as thresholds (2^b - 1 of them)
MAX_THRESHOLD_BITS = 8
#: qonnx's ``data_layout`` of a MultiThreshold by rank: torch's channels-first tensors
CHANNELS_FIRST = {2: "NC", 3: "NCW", 4: "NCHW"}


def _above(value: float) -> float:
    """The next float32 above ``value``: a threshold that a tie at ``value`` does not reach."""
    return float(np.nextafter(np.float32(value), np.float32(np.inf)))


#: RoundType -> the least u (float32) that rounds to k + 1 or more, i.e. the threshold between the
#: integers k and k + 1 (u = x / scale + zero point, as IntQuant and qonnx's Quant compute it)
THRESHOLD: dict[RoundType, Callable[[int], float]] = {
    RoundType.half_up: lambda k: k + 0.5,  # floor(u + 1/2): ties up, FINN's own
    RoundType.half_even: lambda k: k + 0.5 if (k + 1) % 2 == 0 else _above(k + 0.5),  # the tie to the even one
    RoundType.round: lambda k: k + 0.5 if k + 0.5 > 0 else _above(k + 0.5),  # ties away from zero
    RoundType.floor: lambda k: k + 1.0,
    RoundType.toward_zero: lambda k: k + 1.0 if k + 1 > 0 else _above(k),
}


def finn_rounds_alike(round_method: RoundType, signed: bool) -> bool:
    """Whether FINN's conversion of a Quant node (thresholds at k + 1/2: ties up, whatever its
    ``rounding_mode``) rounds as ``round_method``: ``half_up``, and ties away from zero on an unsigned
    grid (below zero everything clamps to 0)."""
    return round_method is RoundType.half_up or (round_method is RoundType.round and not signed)


def thresholds(round_method: RoundType, bits: int, signed: bool, narrow: bool) -> tuple[tuple[float, ...], float, str]:
    """(thresholds, lowest integer, integer type) of a ``bits``-bit quantizer rounding by ``round_method``:
    MultiThreshold(u) + lowest is the quantizer's integer, exactly (every comparison is on float32 u)."""
    lowest = -(2 ** (bits - 1)) + int(narrow) if signed else 0
    highest = 2 ** (bits - 1) - 1 if signed else 2**bits - 1 - int(narrow)
    steps = tuple(THRESHOLD[round_method](k) for k in range(lowest, highest))
    return steps, float(lowest), f"{'INT' if signed else 'UINT'}{bits}"


class _SpecRounding:
    """Take ``rounding_mode`` from the proxy's Quark spec instead of its stale injector field, and
    write what FINN would convert wrongly as what it converts exactly.

    FINN's ``ConvertQONNXtoFINN`` makes an activation Quant node a MultiThreshold at (k + 1/2) steps
    (ties up) whatever its ``rounding_mode``: a half-even quantizer whose inputs meet ties (image
    pixels k/16 at scale 1/8; a requantization of values already on a finer grid) changes silently.
    So an activation quantizer of up to 8 bits that FINN would round otherwise
    (:func:`finn_rounds_alike`) is written on u = x / s (+ z, the division torch performs) as FINN's
    own node with exact thresholds for its rounding (:data:`THRESHOLD`): y = (MultiThreshold(u) +
    lowest (- z)) s. The comparisons are exact, FINN takes the node as it is and absorbs the division
    into the thresholds, and qonnx executes it as torch computes it.

    A signed ``RoundType.half_up`` quantizer wider than that (or a bias) has no QONNX rounding mode
    (HALF_UP rounds ties away from zero): it is written as two Quants, FLOOR at scale 1/2 (two more
    bits) and CEIL: ceil(floor(2u) / 2) = floor(u + 1/2) (u = k + f: floor(2u) / 2 is k for f < 1/2,
    k + 1/2 above), with no sum to round. Not for FINN, which thresholds at most 8 bits.

    Written before as Quant(u + 2^(b-1); unsigned, HALF_UP) - 2^(b-1): in float32, u + 2^(b-1)
    keeps u only to the precision of 2^(b-1) (2^(b-24)), so a u just below a tie k + 1/2 became the
    tie and rounded up (the last 8 bits of a 32-bit bias were lost). EfficientNet-B0's
    squeeze-excitation SiLU gives 16 * sigmoid(16) = 16 - 2^-19 (torch) or 16 - 2^-20 (ONNX
    Runtime's sigmoid) at scale 32: u = 0.5 - 2^-24 or 0.5 - 2^-25, integer 0 in torch and in FINN,
    1 in the graph (32, and 820 on the logits).
    """

    half_up_signed = False
    zero_point_used = False
    #: whether this handler's quantizers are activations (FINN makes them thresholds; biases it folds)
    thresholded = False
    #: (thresholds, lowest integer, integer type) of a quantizer written as thresholds
    thresholds: tuple[tuple[float, ...], float, str] | None = None

    def prepare_for_export(self, module):
        super().prepare_for_export(module)
        spec = spec_of(module)
        self.half_up_signed, self.zero_point_used, self.thresholds = False, False, None
        if not module.is_quant_enabled:
            return
        kwargs = self.symbolic_kwargs
        if spec is not None:
            kwargs["rounding_mode"] = QONNX_ROUNDING[spec.round_method]
            if self.quant_op is BrevitasQuantOp:
                self.quant_op = QuantOp
            rounding, integer = spec.round_method, spec.format is Format.integer
        else:  # a Brevitas quantizer of the user's own: its injector's rounding is its own
            rounding, integer = BREVITAS_ROUNDING.get(kwargs.get("rounding_mode")), self.quant_op is BrevitasQuantOp
        if rounding is None:
            return
        # read here: tensors turned into Python values while tracing warn
        signed, bits = bool(kwargs.get("signed")), int(kwargs.get("bit_width") or 0)
        # thresholds where FINN would round otherwise, and where QONNX has no mode (signed half_up);
        # 2 bits and up: a ternary grid is 2 narrow bits, a bipolar one is no integer grid
        exact_in_finn = finn_rounds_alike(rounding, signed) and not (signed and rounding is RoundType.half_up)
        if self.thresholded and integer and 2 <= bits <= MAX_THRESHOLD_BITS and not exact_in_finn:
            self.thresholds = thresholds(rounding, bits, signed, bool(kwargs["narrow_range"]))
        self.half_up_signed = rounding is RoundType.half_up and signed
        if self.thresholds is not None or self.half_up_signed:
            zero_point = kwargs.get("zero_point")
            self.zero_point_used = zero_point is not None and bool(torch.any(zero_point != 0))

    def _quant(self, x: Tensor, scale: Tensor, zero_point: Tensor, bit_width: Tensor, **attrs) -> Tensor:
        """The Quant node(s) of ``x``; ``attrs``: narrow_range, signed, rounding_mode."""
        thresholded = self.thresholds is not None and x.dim() in CHANNELS_FIRST  # channels on axis 1
        if not (thresholded or self.half_up_signed):
            return self.export_op(self.quant_op, x, scale, zero_point, bit_width, *attrs.values())
        u = x / scale  # as IntQuant.to_int: x / scale + zero_point, rounded, clamped
        if self.zero_point_used:
            u = u + zero_point
        if thresholded:
            q = self.export_op(MultiThresholdOp, u, *self.thresholds, CHANNELS_FIRST[u.dim()])
        else:
            zero = torch.zeros_like(zero_point)
            floor = {**attrs, "narrow_range": False, "rounding_mode": "FLOOR"}
            ceil = {**attrs, "rounding_mode": "CEIL"}
            halves = self.export_op(self.quant_op, u, torch.full_like(scale, 0.5), zero, bit_width + 2, *floor.values())
            q = self.export_op(self.quant_op, halves, torch.ones_like(scale), zero, bit_width, *ceil.values())
        return ((q - zero_point) if self.zero_point_used else q) * scale


class QONNXActHandler(_SpecRounding, BrevitasActQuantProxyHandler):
    thresholded = True

    def symbolic_execution(self, x: Tensor):
        kwargs = dict(self.symbolic_kwargs)
        scale, zero_point, bit_width = kwargs.pop("scale"), kwargs.pop("zero_point"), kwargs.pop("bit_width")
        return self._quant(x, scale, zero_point, bit_width, **kwargs), scale, zero_point, bit_width


class QONNXQuantActHandler(QONNXActHandler):
    """An activation quantizer always as a Quant node, its rounding mode as written (for readers of
    QONNX other than FINN: hls4ml maps Quant nodes only, and rounds ROUND / FLOOR as they say)."""

    thresholded = False


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


class QONNXAccumulatorAwareWeightHandler(BrevitasDecoupledWeightQuantWithInputProxyHandler):
    """A2Q / A2Q+ weights (our :class:`AccumulatorAwareWeightProxy`): a Quant node on the weight as
    torch quantized it (rounded toward zero; Brevitas feeds the float weight with ROUND), the
    decoupled proxy's six outputs. ``quant_weight()`` without an input works on our proxy (the
    planned input grid), which Brevitas' handler calls."""

    handled_layer = AccumulatorAwareWeightProxy

    def symbolic_execution(self, x: Tensor, *args):
        return super().symbolic_execution(_by_data_ptr(self.quant_weight_values, x), *args)


class QCDQAccumulatorAwareWeightHandler(StdQCDQCastONNXDecoupledWeightQuantWithInputProxyHandler):
    """A2Q / A2Q+ weights in QCDQ: Brevitas' handler of the stock proxy (integer weights from
    ``quant_weight()``), for our proxy class (Brevitas looks handlers up by exact class)."""

    handled_layer = AccumulatorAwareWeightProxy


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


#: bit widths above 8 that QCDQ writes on 16-bit integers
WIDE_BITS = 16
#: an unsigned quantizer above 8 bits is written on int16 with its integers and zero point moved down by
#: 2^15: (q - 2^15) - (z - 2^15) = q - z, so DequantizeLinear gives the same values (TorchScript's ONNX
#: export has no uint16 tensors: "ScalarType UInt16 is an unexpected tensor scalar type")
UNSIGNED_SHIFT = 2**15


class QCDQWideActHandler(StdQCDQCastONNXActQuantProxyHandler):
    """Activation quantizers of 9..16 bits on int16 / uint16 QuantizeLinear / DequantizeLinear
    (a Clip to the quantizer's range below 16 bits); 8 bits and fewer as Brevitas writes them."""

    def validate(self, module):
        if module.is_quant_enabled and 8 < float(module.bit_width()) <= WIDE_BITS:
            self.validate_bit_width(module.bit_width(), WIDE_BITS, le_then=True)
            return
        super().validate(module)

    @classmethod
    def signed_dtype(cls, bit_width, is_signed):
        if bit_width is not None and 8 < float(bit_width) <= WIDE_BITS:
            return torch.int16
        return super().signed_dtype(bit_width, is_signed)

    @classmethod
    def zero_point_with_dtype(cls, signed, bit_width, zero_point):
        if 8 < float(bit_width) <= WIDE_BITS:
            return (zero_point if signed else zero_point - UNSIGNED_SHIFT).type(torch.int16)
        return super().zero_point_with_dtype(signed, bit_width, zero_point)

    def assert_ge_zero(self, scale, zero_point, bit_width):
        # Brevitas checks each value >= 0 while tracing; a shifted unsigned zero point is negative
        super().assert_ge_zero(scale, zero_point.to(torch.int32) + UNSIGNED_SHIFT, bit_width)

    def int_clip_symbolic_kwargs(self, narrow, signed, bit_width):
        if not 8 < float(bit_width) <= WIDE_BITS:
            return super().int_clip_symbolic_kwargs(narrow, signed, bit_width)
        from brevitas.function.ops import max_int, min_int

        shift = 0 if signed else UNSIGNED_SHIFT
        low, high = (int(f(signed, narrow, bit_width)) - shift for f in (min_int, max_int))
        if (low, high) == (-(2**15), 2**15 - 1):
            return None  # the whole int16 range: QuantizeLinear saturates there itself
        return {"min_val": torch.tensor(low, dtype=torch.int16), "max_val": torch.tensor(high, dtype=torch.int16)}


class QCDQBiasHandler(StdCDQCastONNXBiasQuantProxyHandler):
    """Brevitas' bias handler with integers that dequantize to the bias exactly (:func:`bias_integers`)."""

    def prepare_for_export(self, module):
        if not module.is_quant_enabled:
            self.symbolic_kwargs = None
            return
        self.validate(module)
        self.symbolic_kwargs = {
            "int_biases": {tm.bias.data_ptr(): bias_integers(tm.quant_bias()) for tm in module.tracked_module_list},
            "scale": module.scale(),
            "zero_point": module.zero_point(),
            "bit_width": module.bit_width(),
        }


def bias_integers(quant) -> Tensor:
    """A quantized bias's integers: for each value, the integer whose DequantizeLinear (``float32(q -
    zero_point) * scale``, as ONNX Runtime computes it) gives the value back, from Brevitas' float32
    quotient ``value / scale`` or else the float64 one. Brevitas' alone fails where float32's spacing
    at the quotient is a quarter step or more (an int32 bias near 3e6 on a 3e-8 grid: "QuantTensor not
    valid"), where the float64 quotient is within ``|q| * 2^-24`` of the integer; near 2^31 float32's
    quotient is the integer Brevitas exported, and the float64 one may be a float32 step away. A value
    that no integer of the bit width gives back is refused."""
    value, scale, zero_point = quant.value, quant.scale, quant.zero_point
    bits = int(quant.bit_width)
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    candidates = [  # clamped: float32's 2^31 is 2^31 - 1 as well
        torch.round(value / scale + zero_point).double().clamp(low, high),
        torch.round(value.double() / scale.double() + zero_point.double()).clamp(low, high),
    ]

    def dequantized(integers: Tensor) -> Tensor:
        return (integers - zero_point.double()).float() * scale.float()

    integers = torch.where(dequantized(candidates[0]) == value, *candidates)
    missed = int((dequantized(integers) != value).sum())
    if missed:
        raise RuntimeError(
            f"bias export: {missed} of {integers.numel()} values of the {bits}-bit bias are not on its grid "
            f"of {low}..{high} steps (the nearest integers dequantize to other values)"
        )
    return integers.to(torch.int8 if bits <= 8 else torch.int32)


def _is_cast(module) -> bool:
    spec = spec_of(module)
    return spec is not None and spec.format is Format.cast


class _CastMixin:
    """x -> Cast(x, to=the narrow type) -> Cast(float) for cast quantizers (bfloat16 / float16);
    other float quantizers go to Brevitas' handler."""

    cast = False

    def prepare_for_export(self, module):
        self.cast = module.is_quant_enabled and _is_cast(module)
        if not self.cast:
            return super().prepare_for_export(module)
        spec = spec_of(module)
        self.cast_dtype = getattr(torch, spec.element.name)
        self.symbolic_kwargs = {"outputs": self._outputs(module)}

    def _outputs(self, module) -> tuple:
        return ()

    def symbolic_execution(self, x: Tensor):
        if not self.cast:
            return super().symbolic_execution(x)
        y = self.export_op(CastOp, self.export_op(CastOp, x, self.cast_dtype), torch.float32)
        return (y, *self.symbolic_kwargs["outputs"])


def _cast_outputs(cast) -> tuple:
    """What a ``CastQuant`` returns beside the value (scale 1, zero point 0, the format): the
    tuple Brevitas' float proxies build their quantized tensor from."""
    return cast(torch.zeros(1))[1:]


class QCDQCastActHandler(_CastMixin, StdFloatQCDQCastONNXActQuantProxyHandler):
    def _outputs(self, module) -> tuple:
        return _cast_outputs(module.fused_activation_quant_proxy.tensor_quant)


class QCDQCastWeightHandler(_CastMixin, StdFloatQCDQCastONNXWeightQuantProxyHandler):
    """The weight cast to the narrow type and back (TorchScript folds the two casts of a constant:
    the initializer is the float32 value of the narrow weight)."""

    def _outputs(self, module) -> tuple:
        return _cast_outputs(module.tensor_quant)

    def symbolic_execution(self, x: Tensor):
        if not self.cast:
            return super().symbolic_execution(x)
        y = self.export_op(CastOp, x.to(self.cast_dtype), torch.float32)
        return (y, *self.symbolic_kwargs["outputs"])


def _one_level(fmt) -> None:
    if fmt.sub_block_size != fmt.block_size:  # the support table refuses these first
        raise RuntimeError(f"{fmt.name}: QCDQ export writes one-level blocks (BFP16) only, not micro-exponents")


class QCDQBlockWeightHandler(QCDQGroupwiseWeightHandler):
    """BFP16 weights: int8 codes as (blocks, 8) rows, dequantized per row with the block's step."""

    handled_layer = SharedMicroexponentWeightProxy

    def prepare_for_export(self, module):
        if module.is_quant_enabled:
            _one_level(module.tensor_quant.fmt)
        super().prepare_for_export(module)


class QCDQBlockActHandler(ONNXBaseHandler):
    """BFP16 activations: the shared exponent of each block computed in the graph, then int8
    QuantizeLinear / DequantizeLinear with the block's step (see the module docstring). Exact:
    comparisons with powers of two, a table lookup, divisions by powers of two and Round (half to
    even), as ``shared_microexponents._quantize`` on finite inputs."""

    handled_layer = SharedMicroexponentActProxy

    def prepare_for_export(self, module):
        if not module.is_quant_enabled:
            self.symbolic_kwargs = None
            return
        tq = module.fused_activation_quant_proxy.tensor_quant
        fmt = tq.fmt
        _one_level(fmt)
        exponents = torch.arange(fmt.emin, fmt.emax + 1)
        self.fmt, self.tensor_quant = fmt, tq
        self.bounds = pow2(exponents[1:], torch.float32)  # E = emin + #{k > emin: 2^k <= block max}
        self.steps = pow2(exponents - (fmt.mantissa_bits - 1), torch.float32)  # step of E, indexed by E - emin
        self.symbolic_kwargs = {"bit_width": tq.bit_width, "zero_point": tq.zero_point}

    def symbolic_execution(self, x: Tensor):
        fmt, tq = self.fmt, self.tensor_quant
        shape = [int(d) for d in x.shape]  # static: constants in the graph, no Shape arithmetic
        dim = tq.group_dim % len(shape)
        last = dim == len(shape) - 1
        moved = x if last else x.movedim(dim, -1)
        blocks = moved.reshape(-1, fmt.block_size)
        largest = blocks.abs().amax(dim=-1, keepdim=True)
        index = (largest >= self.bounds).to(torch.int64).sum(dim=-1)
        step = self.steps[index]
        past = (torch.round(blocks / step.unsqueeze(-1)) > fmt.max_code).to(torch.int64).amax(dim=-1)
        index = (index + past).clamp(max=len(self.steps) - 1)
        step = self.steps[index]
        zero = torch.zeros(step.shape, dtype=torch.int8)
        q = self.export_op(QuantizeLinearOp, blocks, step, zero, torch.int8, 0)
        y = self.export_op(DequantizeLinearOp, q, step, zero, 0)
        scale = step.unsqueeze(-1).expand(blocks.shape)
        moved_shape = [int(d) for d in moved.shape]
        y, scale = y.reshape(moved_shape), scale.reshape(moved_shape)
        if not last:
            y, scale = y.movedim(-1, dim), scale.movedim(-1, dim)
        grouped = [*shape[:dim], shape[dim] // fmt.block_size, fmt.block_size, *shape[dim + 1 :]]
        kw = self.symbolic_kwargs
        return y.reshape(grouped), scale.reshape(grouped), kw["zero_point"], kw["bit_width"]


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


_QONNX_HANDLERS = [
    QONNXActHandler,
    QONNXBiasHandler,
    QONNXWeightHandler,
    QONNXGroupwiseWeightHandler,
    QONNXAccumulatorAwareWeightHandler,
]


class QONNXExportManager(FrozenProxyLookup, QONNXManager):
    handlers = [*_QONNX_HANDLERS, *QONNXManager.handlers]


class QONNXDynamoExportManager(FrozenProxyLookup, QONNXDynamoManager):
    handlers = [*_QONNX_HANDLERS, *QONNXDynamoManager.handlers]


_QUANT_NODE_HANDLERS = [QONNXQuantActHandler, *_QONNX_HANDLERS[1:]]


class QONNXQuantNodeExportManager(FrozenProxyLookup, QONNXManager):
    handlers = [*_QUANT_NODE_HANDLERS, *QONNXManager.handlers]


class QONNXQuantNodeDynamoExportManager(FrozenProxyLookup, QONNXDynamoManager):
    handlers = [*_QUANT_NODE_HANDLERS, *QONNXDynamoManager.handlers]


_QCDQ_HANDLERS = [
    QCDQBiasHandler,
    QCDQAccumulatorAwareWeightHandler,
    QCDQGroupwiseWeightHandler,
    QCDQWideActHandler,
    QCDQCastActHandler,
    QCDQCastWeightHandler,
    QCDQBlockWeightHandler,
    QCDQBlockActHandler,
]


class QCDQExportManager(FrozenProxyLookup, StdQCDQONNXManager):
    handlers = [*_QCDQ_HANDLERS, *StdQCDQONNXManager.handlers]


class QCDQDynamoExportManager(FrozenProxyLookup, StdQCDQONNXDynamoManager):
    handlers = [QCDQGroupwiseWeightHandler, *StdQCDQONNXDynamoManager.handlers]


#: dynamo -> the QONNX export manager writing every activation quantizer as a Quant node
#: (``Target.thresholds`` False: a target whose reader rounds as QONNX says, not FINN)
QUANT_NODE_MANAGERS = {False: QONNXQuantNodeExportManager, True: QONNXQuantNodeDynamoExportManager}

#: (format, dynamo) -> Brevitas export manager
MANAGERS = {
    (ExportFormat.qonnx, False): QONNXExportManager,
    (ExportFormat.qonnx, True): QONNXDynamoExportManager,
    (ExportFormat.qcdq, False): QCDQExportManager,
    (ExportFormat.qcdq, True): QCDQDynamoExportManager,
}
