"""Graph mode (``Config.backend=Backend.fx`` / ``quant_mode=QuantizationMode.fx_graph_mode``): the
sites it quantizes and the config role each takes. Importable without Brevitas.

The model is traced with ``torch.fx``; every tensor flowing between layers is quantized once,
where it is produced, and handed on as a quantized tensor:

=====================  ============================================  =====================================
site (type key)        what it is                                    roles -> where the quantizer goes
=====================  ============================================  =====================================
``GraphInput``         each required input of ``forward``            ``input_tensors``: quantizer on the
                       (named by the argument, e.g. ``"x"``)          network input
activation             ``nn.ReLU``, ``ReLU6``, ``Hardtanh``,          ``output_tensors``, else
(its module class)     ``Sigmoid``, ``Tanh``, ``LeakyReLU``,          ``input_tensors``: quantizer on its
                       ``GELU``, ``SiLU``, ``Hardswish``,             output (the activation itself is
                       ``Hardsigmoid``, ``Mish``, ``ELU``, and        kept exactly)
                       their functional
                       forms (``F.relu``, ``torch.relu``,
                       ``x.relu()``, ...); ``LayerNorm``,
                       ``Softmax`` (``F.softmax``);
                       :class:`QuantPoint`
``Add``                ``a + b``, ``torch.add``, ``Tensor.add``       ``input_tensors``: one quantizer
                       of two tensors                                 shared by both inputs (one scale);
                                                                      ``output_tensors``, else
                                                                      ``input_tensors``: the sum
``Cat``                ``torch.cat`` / ``torch.concat``               ``input_tensors``: one quantizer
                                                                      shared by all inputs;
                                                                      ``output_tensors``: the result
compute layer          ``Linear``, ``Conv*``, ``ConvTranspose*``,     ``weight``, ``bias``,
(its module class)     ``MultiheadAttention``                         ``output_tensors`` as layerwise;
                                                                      ``input_tensors`` only where the
                                                                      input arrives float (the summary
                                                                      shows ``= site`` where it arrives
                                                                      quantized from that site)
average pool           ``nn.AvgPool2d`` (no padding),                 ``input_tensors`` where the input
(its module class)     ``nn.AdaptiveAvgPool2d``, ``F.avg_pool2d``,    arrives float; ``output_tensors``
                       ``x.mean((2, 3))``                             (else the input's spec): the
                                                                      average requantized; for the
                                                                      FINN target a windowed pool
                                                                      truncates the sum instead
=====================  ============================================  =====================================

So an ordinary config (``weight`` and ``input_tensors`` set) quantizes the network input, every
activation, the residual additions and concatenations and every compute layer; per-type
(``layer_type_quant_config={"ReLU": ...}``, ``{"Add": ...}``) and per-name
(``layer_quant_config={"blocks.0.add": ...}``) configs and ``exclude`` work on every site. A site's
name is its module path; a functional call gets the path of the module whose ``forward`` makes it
plus the function's name (``blocks.0.add``, ``blocks.0.relu_1`` when ``blocks.0.relu`` is taken).

Max pooling, flattening, reshaping and dropout (the identity where graphs are exported) pass
quantized tensors through. Any other operation (``BatchNorm`` not merged, ``GroupNorm``, padded
average pooling, ...) is named in a warning and left float; what follows it quantizes its own input.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ACTIVATIONS", "Add", "Cat", "GraphInput", "QuantPoint"]


class QuantPoint(nn.Module):
    """The identity, as a site whose output graph mode quantizes: a model marks with it a tensor the
    NPU takes quantized that no other site produces (the result of an activation x activation
    product, the operands of attention's MatMuls). Type key ``"QuantPoint"``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


#: float operations whose output graph mode quantizes (kept exactly, a quantizer after them): the
#: activations, and the normalisations the NPU runs as DQ -> op -> Q (LayerNorm, Softmax)
ACTIVATIONS: tuple[type[nn.Module], ...] = (
    nn.ReLU,
    nn.ReLU6,
    nn.Hardtanh,
    nn.Sigmoid,
    nn.Tanh,
    nn.LeakyReLU,
    nn.GELU,
    nn.SiLU,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Mish,
    nn.ELU,
    nn.LayerNorm,
    nn.Softmax,
    QuantPoint,
)


class GraphInput(nn.Module):
    """Site type of a network input (the module quantizing it is a ``QuantIdentity``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Add(nn.Module):
    """An addition of two tensors, as a module (graph mode turns ``a + b`` into one)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


class Cat(nn.Module):
    """A concatenation, as a module (graph mode turns ``torch.cat(tensors, dim)`` into one)."""

    def forward(self, tensors: list[torch.Tensor], dim: int = 0) -> torch.Tensor:
        return torch.cat(tensors, dim)
