"""The tensors of AMD Quark's checkpoint files, from a quantized model and back into one.

Two layouts (``quark.torch.export.api`` writes and reads the files):

- **the model's state** (``save_params``): the quantized model's ``state_dict`` as it is: float
  weights, calibrated thresholds, flags. Loaded into the model the same config builds, it restores
  the model bit for bit, whatever its formats.
- **Quark's format** (``export_safetensors``): per quantized layer ``<layer>.weight`` holds the
  weight's integers (``real_quantized``: int8 / uint8 / int16 as they are, 4-bit weights of 2-D
  layers packed eight to an int32 as Quark packs them, ``pack_method`` "reorder" or "order") or their
  dequantized values (``fake_quantized``), beside ``<layer>.weight_scale`` / ``.weight_zero_point``
  and ``<layer>.input_scale`` / ``.input_zero_point`` / ``.output_scale`` / ``.output_zero_point``
  (Quark's shapes: a scalar per tensor, one per channel, rows x groups per group). The rest of the
  model's state keeps its own keys, and the weights' grids are kept as the statistics they come from
  (the frozen statistic of :mod:`..algorithms.frozen`, ``...parameter_list_stats.frozen``): a weight's
  scale is a function of the float weight here, and the weight the file gives back is the dequantized
  one, whose own statistic is another (an int8 weight's maximum moves to 127 x scale). With the
  statistic kept, the reloaded layer quantizes the dequantized weight to the same integers with the
  same scale: bit for bit, checked against the file's scales at load.

Integer weights only: a block or minifloat weight (MX, MX6, BFP16, fp8, ...) derives its scales from
the weight's blocks, which a dequantized weight does not reproduce (a block maximum rounded up to the
next power of two moves its shared exponent), so those models are refused, naming the layers
(``save_params`` stores them bit-exactly).
"""

from __future__ import annotations

import torch
from brevitas.quant_tensor import GroupwiseIntQuantTensor, IntQuantTensor
from torch import nn

from quark.torch.extensions.brevitas._backend.algorithms import frozen

#: Quark's order of the eight 4-bit values in an int32, per pack method
NIBBLE_ORDER = {"reorder": (0, 2, 4, 6, 1, 3, 5, 7), "order": (0, 1, 2, 3, 4, 5, 6, 7)}
#: (bit width, signed) -> Quark's storage dtype of unpacked integers
STORAGE = {(8, True): torch.int8, (8, False): torch.uint8, (16, True): torch.int16, (16, False): torch.int16}
#: activation quantizer attribute -> the prefix of its tensors in Quark's layout
ACTIVATIONS = {"input_quant": "input", "output_quant": "output"}


def state_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state, every tensor a contiguous CPU copy of its own (safetensors refuses shared storage)."""
    return {key: value.detach().cpu().contiguous().clone() for key, value in model.state_dict().items()}


def weighted_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, layer) of the layers with a quantized weight."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(getattr(module, "weight_quant", None), nn.Module)
        and getattr(module.weight_quant, "is_quant_enabled", False)
        and hasattr(module, "quant_weight")
    ]


def refused_layers(model: nn.Module) -> list[str]:
    """The quantized layers whose weight is not on an integer grid (see the module), described."""
    refused = []
    for name, layer in weighted_layers(model):
        quant = layer.quant_weight()
        if not isinstance(quant, (IntQuantTensor, GroupwiseIntQuantTensor)):
            refused.append(f"{name} ({type(quant).__name__})")
    return refused


def pin_weight_grids(model: nn.Module) -> None:
    """Fix every statistic a weight's scale or zero point is computed from at the current weight, kept in
    the state as ``...parameter_list_stats.frozen`` (layers without one, TQT / LSQ, keep their parameter)."""
    for _, layer in weighted_layers(model):
        frozen.freeze(layer)


def quark_tensors(model: nn.Module, weight_format: str, pack_method: str) -> dict[str, torch.Tensor]:
    """Quark's layout of a quantized model's tensors (see the module). ``model`` is changed (its weight
    grids pinned): pass a copy."""
    pin_weight_grids(model)
    tensors = state_tensors(model)
    for name, layer in weighted_layers(model):
        quant = layer.quant_weight()
        ints = quant.int().detach().cpu()
        tensors[f"{name}.weight"] = (
            _pack(ints, int(quant.bit_width), bool(quant.signed), pack_method, name)
            if weight_format == "real_quantized"
            else quant.value.detach().cpu().contiguous()
        )
        grouped = isinstance(quant, GroupwiseIntQuantTensor)  # Brevitas expands its scales to every element
        scale, zero_point = (quant.scale_, quant.zero_point_.expand_as(quant.scale_)) if grouped else (quant.scale, quant.zero_point)
        tensors[f"{name}.weight_scale"] = _quark_shape(scale, ints.shape, grouped)
        tensors[f"{name}.weight_zero_point"] = _quark_shape(zero_point, ints.shape, grouped).round().to(torch.int32)
        for attribute, prefix in ACTIVATIONS.items():
            proxy = getattr(layer, attribute, None)
            if proxy is not None and getattr(proxy, "is_quant_enabled", False):
                tensors[f"{name}.{prefix}_scale"] = proxy.scale().detach().cpu().reshape(())
                tensors[f"{name}.{prefix}_zero_point"] = proxy.zero_point().detach().cpu().reshape(()).round().to(torch.int32)
    return tensors


def load_quark_tensors(model: nn.Module, tensors: dict[str, torch.Tensor], weight_format: str, pack_method: str) -> None:
    """Load Quark's layout (``quark_tensors``) into the model the same config built, bit for bit.

    Raises ``ValueError`` naming the key or layer when the file does not fit the model or a weight's
    reloaded scale differs from the file's."""
    pin_weight_grids(model)
    state = dict(tensors)
    scales = {}
    for name, layer in weighted_layers(model):
        grid = layer.quant_weight()  # the shapes of its scale and zero point, its signedness
        scale = _torch_shape(_take(state, f"{name}.weight_scale"), grid.scale).to(layer.weight)
        zero_point = _torch_shape(_take(state, f"{name}.weight_zero_point"), grid.zero_point).to(layer.weight)
        if weight_format == "real_quantized":
            ints = _unpack(_take(state, f"{name}.weight"), layer.weight.shape, pack_method, bool(grid.signed))
            state[f"{name}.weight"] = (ints.to(layer.weight) - zero_point) * scale
        for prefix in ACTIVATIONS.values():
            state.pop(f"{name}.{prefix}_scale", None)
            state.pop(f"{name}.{prefix}_zero_point", None)
        scales[name] = scale
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(f"the file's tensors do not fit the model the config builds: {error}") from error
    for name, layer in weighted_layers(model):
        if not torch.equal(layer.quant_weight().scale.detach(), scales[name]):
            raise ValueError(f"{name}: the reloaded weight's scale differs from the file's weight_scale (a file not written for this model?)")


def _take(state: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    if key not in state:
        raise ValueError(f"the file has no tensor {key!r}, which the model the config builds needs")
    return state.pop(key)


def _quark_shape(values: torch.Tensor, shape: torch.Size, grouped: bool) -> torch.Tensor:
    """A scale or zero point in Quark's shape: a scalar per tensor, one value per channel, rows x groups."""
    values = values.detach().cpu().contiguous()
    if grouped:
        return values.reshape(shape[0], -1)
    return values.reshape(()) if values.numel() == 1 else values.reshape(-1)


def _torch_shape(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Quark's shape of a scale or zero point back in the shape the quantizer computes (``like``): rows x
    groups expanded to every element of a grouped weight."""
    if like.numel() == 1 and values.numel() > 1 and bool((values == values.flatten()[0]).all()):
        values = values.flatten()[:1]  # one value the quantizer broadcasts (a symmetric grid's zero point)
    if values.dim() == 2 and values.numel() != like.numel() and like.numel() % values.numel() == 0:
        values = values.repeat_interleave(like.shape[-1] // values.shape[-1], dim=-1)
    if values.numel() != like.numel():
        raise ValueError(f"a scale or zero point of {values.numel()} values where the model has {like.numel()}")
    return values.reshape(like.shape)


def _pack(ints: torch.Tensor, bits: int, signed: bool, pack_method: str, name: str) -> torch.Tensor:
    """Quark's storage of a real-quantized weight: 8 / 16 bits as they are, 4 bits packed."""
    if (bits, signed) in STORAGE:
        return ints.round().to(STORAGE[(bits, signed)]).contiguous()
    if bits == 4 and ints.ndim == 2:
        return _pack_4_bits(ints.round().to(torch.int32), pack_method)
    raise ValueError(
        f"{name}: weight_format='real_quantized' stores 8- and 16-bit weights, and 4-bit weights of 2-D layers "
        f"(packed eight to an int32); this layer's weight is {'int' if signed else 'uint'}{bits} of shape "
        f"{tuple(ints.shape)}: use weight_format='fake_quantized'"
    )


def _pack_4_bits(ints: torch.Tensor, pack_method: str) -> torch.Tensor:
    """Eight 4-bit values of a row in one int32, the i-th in bits 4i..4i+3, in Quark's order."""
    rows, columns = ints.shape
    padded = torch.zeros(rows, -(-columns // 8) * 8, dtype=torch.int32)
    padded[:, :columns] = ints & 0x0F
    groups = padded.view(rows, -1, 8)[:, :, list(NIBBLE_ORDER[pack_method])]
    shifts = torch.arange(8, dtype=torch.int32) * 4
    return (groups << shifts).sum(dim=-1, dtype=torch.int64).to(torch.int32).contiguous()


def _unpack(stored: torch.Tensor, shape: torch.Size, pack_method: str, signed: bool) -> torch.Tensor:
    """The integers ``_pack`` stored, as int64 of the weight's shape."""
    if stored.dtype in STORAGE.values():
        if stored.shape != shape:
            raise ValueError(f"a weight of shape {tuple(stored.shape)} where the model has {tuple(shape)}")
        return stored.to(torch.int64)
    rows, columns = shape
    shifts = torch.arange(8, dtype=torch.int64) * 4
    nibbles = (stored.to(torch.int64).unsqueeze(-1) >> shifts) & 0x0F
    values = nibbles[:, :, torch.tensor(NIBBLE_ORDER[pack_method]).argsort()].reshape(rows, -1)[:, :columns]
    return torch.where(values >= 8, values - 16, values) if signed else values
