"""Batch norm folded into the layer before it during QAT (``TQTSpec.fold_batch_norm``).

The scheme of Jacob et al. 2018 (section 3.2), Krishnamoorthi 2018 (section 3.2) and PyTorch's
``torch.ao.nn.intrinsic.qat.ConvBn2d`` (its ``_forward_approximate``), with
``s = gamma / sqrt(running_var + eps)``:

- the weight quantized is ``w * s``, the weight merged batch norm quantizes;
- while the statistics train (training mode, not frozen): ``y = bn(conv(x, q(w * s)) / s + b)``;
  batch norm normalises with the batch's mean and variance (which rescales the output by
  ``sqrt(running_var + eps) / sqrt(batch_var + eps)``) and updates its running statistics;
- frozen (after ``freeze_batch_norm_steps`` training steps) and in eval mode: ``y = conv(x,
  q(w * s), q_b(beta + (b - running_mean) * s))``, merged batch norm bit for bit (Brevitas'
  ``mul_add_from_bn`` and ``merge_bn`` formulas, in their order of operations);
- frozen (``absorb_frozen_batch_norm``, the default), when the layer is built if the statistics are
  frozen from the start, else at the next training step: absorbed, i.e. the
  layer's ``weight`` and bias (``bn.bias`` for a layer without one) take those folded values in
  place and are used as they are (:meth:`FoldedBatchNorm.absorb`); the forward does not change, bit
  for bit, but the optimizer now steps the folded weight itself, as with batch norm merged before
  quantization, and gamma and beta stop training (``requires_grad`` False). Without absorbing, the gradients reach ``w``,
  ``gamma`` and ``beta`` through ``s``, and Adam, which moves each parameter by about its learning
  rate whatever the gradient's scale, moved the folded weight ``s`` times as far as merged batch
  norm does (s = 3 to 19 on the digits CNN: three times as many of its 4-bit codes changed per step,
  and the held-out accuracy swung more; ``benchmarks/qat_batch_norm.py``). Gamma, trained through
  ``w * s``, also rescaled a whole channel's weights against the fixed grid at once.

Brevitas has no QAT fusion of a layer and its batch norm: it merges batch norm once, before or
after quantization (``brevitas.nn.utils.merge_bn``, ``brevitas.graph.MergeBatchNorm``,
``BatchNorm2dToQuantScaleBias``), after which the statistics no longer follow the quantized
weights. The layers here are Brevitas' own (``QuantConv2d``, ...), with the batch norm as a child,
the float layer's weight and bias as their parameters, and :meth:`FoldedBatchNorm.quant_weight`
quantizing the folded weight; at export and :func:`~..qat.freeze` each becomes the Brevitas layer
of merged batch norm (:func:`merge`), so the graphs are those of merged batch norm.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from typing import Any

import brevitas.nn as qnn
import torch
from brevitas.nn.utils import merge_bn, mul_add_from_bn
from brevitas.quant_tensor import QuantTensor
from torch import fx, nn

from quark.torch.extensions.brevitas._backend.algorithms.parts import traced
from quark.torch.extensions.brevitas._backend.mapping import LAYERS, build_layer
from quark.torch.quantization.config.spec import Role
from quark.torch.quantization.plan import LayerPlan, layer_type

logger = logging.getLogger(__name__)

#: layer type -> the batch norm that folds into it during QAT (Brevitas' ``MergeBatchNorm``
#: patterns whose output channels are the weight's axis 0)
PAIRS: dict[type[nn.Module], type[nn.Module]] = {
    nn.Linear: nn.BatchNorm1d,
    nn.Conv1d: nn.BatchNorm1d,
    nn.Conv2d: nn.BatchNorm2d,
    nn.Conv3d: nn.BatchNorm3d,
}


class FoldedBatchNorm:
    """A Brevitas layer with the batch norm that follows it folded in (mixed into the layer class).

    ``weight`` and ``bias`` are the float layer's (the bias may be None); ``bn`` is the batch norm,
    which keeps its parameters and statistics. ``batch_norm_steps`` counts the training steps
    taken with batch statistics; ``batch_norm_frozen`` is set after ``freeze_batch_norm_steps``
    of them (or by :meth:`freeze_batch_norm`); ``batch_norm_absorbed`` once :meth:`absorb` has put
    the folded values in ``weight`` and the bias. All three are buffers: a checkpoint restores them
    with the weights they describe.
    """

    bn: nn.modules.batchnorm._BatchNorm
    freeze_batch_norm_steps: int | None
    absorb_frozen_batch_norm: bool

    def attach(
        self,
        bn: nn.Module,
        name: str,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        freeze_steps: int | None,
        absorb: bool = True,
    ) -> None:
        """Take ``bn`` (named ``name`` in the float model) and the float layer's ``weight`` / ``bias``
        (the layer was built on the merged ones)."""
        with torch.no_grad():
            self.weight.copy_(weight)
            if bias is None:
                self.bias = None
            else:
                self.bias.copy_(bias)
        self.bn = bn
        self.batch_norm_name = name
        self.freeze_batch_norm_steps = freeze_steps
        self.absorb_frozen_batch_norm = absorb
        device = self.weight.device
        self.register_buffer("batch_norm_steps", torch.zeros((), dtype=torch.int64, device=device))
        self.register_buffer("batch_norm_frozen", torch.tensor(freeze_steps == 0, device=device))
        self.register_buffer("batch_norm_absorbed", torch.tensor(False, device=device))
        if absorb and self._absorbable():  # frozen from the start: before an optimizer or DDP sees the parameters
            self.absorb()

    # -- the folded tensors -----------------------------------------------------------------------

    def _factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(s, beta - running_mean * s) from the running statistics (Brevitas' ``mul_add_from_bn``)."""
        bn = self.bn
        ones = torch.ones_like(bn.running_var)
        return mul_add_from_bn(
            bn_mean=bn.running_mean,
            bn_var=bn.running_var,
            bn_eps=bn.eps,
            bn_weight=bn.weight if bn.affine else ones,
            bn_bias=bn.bias if bn.affine else torch.zeros_like(ones),
        )

    def _channels(self, factor: torch.Tensor, dims: int, axis: int) -> torch.Tensor:
        shape = [1] * dims
        shape[axis] = -1
        return factor.view(shape)

    def folded_weight(self) -> torch.Tensor:
        """``w * s`` per output channel: the weight merged batch norm quantizes (``weight`` itself
        once absorbed)."""
        if self.absorbed:
            return self.weight
        mul, _ = self._factors()
        return self.weight * self._channels(mul, self.weight.dim(), 0)

    def folded_bias(self) -> torch.Tensor:
        """``b * s + (beta - running_mean * s)`` (``beta - running_mean * s`` without a bias); once
        absorbed, the bias itself (``bn.bias`` for a layer without one)."""
        if self.absorbed:
            return self.bn.bias if self.bias is None else self.bias
        mul, add = self._factors()
        return add if self.bias is None else self.bias * mul + add

    @torch.no_grad()
    def shift_output(self, shift: torch.Tensor) -> bool:
        """Add ``shift`` (one value per output channel) to the output of the frozen or eval-mode
        forward, through the parameter :meth:`folded_bias` reads; False where none holds it (a
        batch norm without affine parameters after a layer without a bias)."""
        if self.absorbed:
            target = self.bn.bias if self.bias is None else self.bias
        elif self.bn.affine:
            target = self.bn.bias  # beta enters the folded bias as it is
        elif self.bias is not None:
            target, shift = self.bias, shift / self._factors()[0]  # b enters it times s
        else:
            return False
        target.add_(shift.to(target))
        return True

    @property
    def absorbed(self) -> bool:
        return bool(self.batch_norm_absorbed)

    def _absorbable(self) -> bool:
        return bool(self.batch_norm_frozen) and not self.absorbed and (self.bn.affine or self.bias is not None)

    def absorb(self) -> None:
        """Put the folded weight and bias in the layer's own parameters, in place (the same
        ``Parameter`` objects: an optimizer holding them trains them on): ``weight = w * s``, the bias
        (``bn.bias`` without one) ``b * s + beta - running_mean * s``. The forward is unchanged bit for
        bit (the same tensors are computed once instead of at every call); gamma, the running
        statistics and, with a bias, beta are no longer read. Frozen statistics only."""
        if self.absorbed:
            return
        if not bool(self.batch_norm_frozen):
            raise RuntimeError(f"{type(self).__name__}.absorb: the batch norm's statistics are not frozen")
        if not self.bn.affine and self.bias is None:
            raise NotImplementedError(f"{type(self).__name__}.absorb: no parameter to hold the folded bias")
        with torch.no_grad():
            weight, bias = self.folded_weight(), self.folded_bias()
            self.weight.copy_(weight)
            (self.bn.bias if self.bias is None else self.bias).copy_(bias)
        self.batch_norm_absorbed.fill_(True)
        # no longer read: no gradient (DistributedDataParallel built after this leaves them out; one
        # built before an absorption later in training needs find_unused_parameters=True)
        unused = [self.bn.weight] + ([self.bn.bias] if self.bias is not None else []) if self.bn.affine else []
        for param in unused:
            param.requires_grad_(False)

    def quant_weight(self, quant_input: Any = None, subtensor_slice_list: Any = None):
        """The quantized folded weight (Brevitas' ``quant_weight`` quantizes ``self.weight``)."""
        if subtensor_slice_list is not None:
            raise NotImplementedError(f"{type(self).__name__}: quantizing a slice of a folded weight")
        return self.weight_quant(self.folded_weight())

    # -- statistics -------------------------------------------------------------------------------

    @property
    def batch_statistics(self) -> bool:
        """Whether this forward normalises with the batch's statistics (training, not frozen)."""
        return self.training and self.bn.training and not bool(self.batch_norm_frozen)

    def freeze_batch_norm(self) -> None:
        """Stop updating the statistics now: from here on the layer computes merged batch norm."""
        self.batch_norm_frozen.fill_(True)

    def forward_impl(self, inp):
        # absorbed at a training step, not in the step that froze the statistics: its autograd graph
        # still holds the weight, which absorbing changes in place
        if self.training and self.absorb_frozen_batch_norm and self._absorbable():
            self.absorb()
        inp = self.unpack_input(inp)
        quant_input = self.input_quant(inp)
        quant_weight = self.quant_weight()
        if self.batch_statistics:
            output = _value(self.inner_forward_impl(quant_input, quant_weight, None))
            mul, _ = self._factors()
            output = output / self._channels(mul, output.dim(), 1)
            if self.bias is not None:
                output = output + self._channels(self.bias, output.dim(), 1)
            output = self.bn(output)
            with torch.no_grad():
                self.batch_norm_steps += 1
                if self.freeze_batch_norm_steps is not None and int(self.batch_norm_steps) >= self.freeze_batch_norm_steps:
                    self.freeze_batch_norm()
        else:
            quant_bias = self.bias_quant(self.folded_bias(), quant_input, quant_weight)
            output = self.inner_forward_impl(quant_input, quant_weight, quant_bias)
        return self.pack_output(self.output_quant(output))

    def merge(self) -> nn.Module:
        """Become the Brevitas layer of merged batch norm, in place: weight ``w * s`` and bias
        ``b * s + beta - running_mean * s`` as parameters, the same quantizers; returns ``self``."""
        with torch.no_grad():
            weight, bias = self.folded_weight(), self.folded_bias()
        requires_grad = self.weight.requires_grad
        for name in ("bn",):
            del self._modules[name]
        for name in ("batch_norm_steps", "batch_norm_frozen", "batch_norm_absorbed"):
            del self._buffers[name]
        del self.freeze_batch_norm_steps, self.absorb_frozen_batch_norm, self.batch_norm_name
        self.__class__ = MERGED[type(self)]  # the quantizers track this object: it stays the same one
        self.weight = nn.Parameter(weight, requires_grad=requires_grad)
        self.bias = nn.Parameter(bias, requires_grad=requires_grad)
        return self

    def _load_from_state_dict(self, state_dict, prefix, *args):
        """A state of the merged layer (saved after ``freeze``) merges this one first, so a model rebuilt
        from its config loads the checkpoint of its frozen self."""
        attached = "bn" in self._modules  # (not while the layer is being built)
        if attached and prefix + "weight" in state_dict and prefix + "batch_norm_steps" not in state_dict:
            self.merge()
            return self._load_from_state_dict(state_dict, prefix, *args)  # now the merged layer's
        if attached and prefix + "batch_norm_steps" in state_dict and prefix + "batch_norm_absorbed" not in state_dict:
            # saved before absorbing existed: its weight is w, not the folded one
            state_dict[prefix + "batch_norm_absorbed"] = torch.tensor(False)
        return super()._load_from_state_dict(state_dict, prefix, *args)

    def extra_repr(self) -> str:
        steps = self.freeze_batch_norm_steps
        absorbed = ", absorbed" if self.absorbed else ""
        return f"{super().extra_repr()}, batch norm folded (statistics frozen after {steps} steps{absorbed})"


def _value(x: Any) -> torch.Tensor:
    return x.value if isinstance(x, QuantTensor) else x


class QuantLinearBatchNorm(FoldedBatchNorm, qnn.QuantLinear):
    """``QuantLinear`` -> ``BatchNorm1d``, folded (see :class:`FoldedBatchNorm`)."""


class QuantConv1dBatchNorm(FoldedBatchNorm, qnn.QuantConv1d):
    """``QuantConv1d`` -> ``BatchNorm1d``, folded (see :class:`FoldedBatchNorm`)."""


class QuantConv2dBatchNorm(FoldedBatchNorm, qnn.QuantConv2d):
    """``QuantConv2d`` -> ``BatchNorm2d``, folded (see :class:`FoldedBatchNorm`)."""


class QuantConv3dBatchNorm(FoldedBatchNorm, qnn.QuantConv3d):
    """``QuantConv3d`` -> ``BatchNorm3d``, folded (see :class:`FoldedBatchNorm`)."""


#: Brevitas layer -> the same layer with a batch norm folded in
FOLDED: dict[type[nn.Module], type[nn.Module]] = {
    qnn.QuantLinear: QuantLinearBatchNorm,
    qnn.QuantConv1d: QuantConv1dBatchNorm,
    qnn.QuantConv2d: QuantConv2dBatchNorm,
    qnn.QuantConv3d: QuantConv3dBatchNorm,
}
MERGED: dict[type[nn.Module], type[nn.Module]] = {folded: layer for layer, folded in FOLDED.items()}


# -- which batch norm follows which layer -----------------------------------------------------------


def graph_pairs(graph: fx.GraphModule, prefix: str = "") -> dict[str, str]:
    """layer name -> the batch norm that alone takes its output, in ``graph`` (names with ``prefix``).

    A pair: a ``PAIRS`` layer called once whose only user is a batch norm of the matching type,
    called once, with running statistics and as many features as the layer has outputs."""
    modules = dict(graph.named_modules())
    calls: dict[str, int] = {}
    for node in graph.graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    found = {}
    for node in graph.graph.nodes:
        bn = modules.get(node.target) if node.op == "call_module" else None
        if bn is None or type(bn) not in PAIRS.values() or not node.args:
            continue
        prev = node.args[0]  # a node of torch.fx or of Brevitas' backport of it (module_pairs traces with that)
        if getattr(prev, "op", None) != "call_module" or len(prev.users) != 1:
            continue
        layer = modules.get(prev.target)
        if (
            layer is not None
            and PAIRS.get(layer_type(layer)) is type(bn)
            and calls[prev.target] == 1
            and calls[node.target] == 1
            and bn.track_running_stats
            and bn.num_features == layer.weight.shape[0]
        ):
            found[prefix + prev.target] = prefix + node.target
    return found


def module_pairs(model: nn.Module) -> dict[str, str]:
    """:func:`graph_pairs` in the largest submodules of ``model`` that ``torch.fx`` traces."""
    found: dict[str, str] = {}

    def visit(module: nn.Module, prefix: str) -> None:
        if not any(type(m) in PAIRS.values() for m in module.modules()):
            return
        graph = traced(module)
        if graph is None:
            for name, child in module.named_children():
                visit(child, f"{prefix}{name}.")
            return
        found.update(graph_pairs(graph, prefix))

    visit(model, "")
    return found


def wants_folding(plans: list[LayerPlan]) -> bool:
    return any(p.specs.get(Role.weight) is not None and p.specs[Role.weight].fold_batch_norm for p in plans)


def assign(plans: list[LayerPlan], pairs: dict[str, str]) -> None:
    """Name in each plan whose weight spec folds batch norm the batch norm that follows its layer."""
    for plan in plans:
        weight = plan.specs.get(Role.weight)
        if weight is not None and weight.fold_batch_norm and plan.name in pairs:
            plan.batch_norm = pairs[plan.name]
    folded = [f"{p.name} + {p.batch_norm}" for p in plans if p.batch_norm]
    if folded:
        logger.info("batch norm folded into the layer before it during QAT: %s", ", ".join(folded))


# -- building and merging -------------------------------------------------------------------------


def build(
    plan: LayerPlan, module: nn.Module, model: nn.Module, return_quant_tensor: bool = False, inputs: Any = None
) -> nn.Module:
    """The Brevitas layer of ``plan`` for ``module``: with the plan's batch norm (a module of
    ``model``) folded in, where it names one (``module`` and the batch norm are not modified);
    ``inputs``: the spec of an input quantized upstream (see ``mapping.build_layer``)."""
    if plan.batch_norm is None:
        return build_layer(plan, module, return_quant_tensor=return_quant_tensor, inputs=inputs)
    bn = model.get_submodule(plan.batch_norm)
    merged = copy.deepcopy(module)
    merge_bn(merged, bn)  # the quantizers start from the merged weight (a TQT threshold from w * s)
    quant_cls = FOLDED[LAYERS[layer_type(module)].quant_cls]
    layer = build_layer(plan, merged, return_quant_tensor=return_quant_tensor, quant_cls=quant_cls, inputs=inputs)
    spec = plan.specs[Role.weight]
    layer.attach(bn, plan.batch_norm, module.weight, module.bias, spec.freeze_batch_norm_steps, spec.absorb_frozen_batch_norm)
    return layer


def folded_layers(model: nn.Module) -> Iterator[FoldedBatchNorm]:
    return (m for m in model.modules() if isinstance(m, FoldedBatchNorm))


def merge(model: nn.Module) -> nn.Module:
    """Every folded layer of ``model`` becomes the Brevitas layer of merged batch norm, in place."""
    for layer in list(folded_layers(model)):
        layer.merge()
    return model


def merged(model: nn.Module) -> nn.Module:
    """``model`` itself without folded layers, else a copy with them merged (exports take it)."""
    return merge(copy.deepcopy(model)) if next(folded_layers(model), None) is not None else model


def freeze_batch_norm(model: nn.Module) -> int:
    """Freeze the statistics of every folded batch norm now (PyTorch's ``freeze_bn_stats``);
    returns how many."""
    layers = list(folded_layers(model))
    for layer in layers:
        layer.freeze_batch_norm()
    return len(layers)


def float_keys(model: nn.Module) -> dict[str, str]:
    """A float model's state_dict key prefix of each folded batch norm -> where it is now
    (``"1."`` -> ``"0.bn."``)."""
    return {f"{m.batch_norm_name}.": f"{name}.bn." for name, m in model.named_modules() if isinstance(m, FoldedBatchNorm)}
