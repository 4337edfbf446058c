"""The resolved plan: for every site of a model and every tensor role, the effective spec.

A backend says where it can quantize (its :class:`Site` list: modules for the layerwise backend,
traced nodes such as activations or additions for graph mode); :func:`resolve` assigns each site,
for each role it has, ``layer_quant_config`` (name pattern) > ``layer_type_quant_config`` (type)
> ``global_quant_config``, a role left None inheriting from the level below, and leaves sites
whose name (or an ancestor's) matches ``exclude`` float. A pattern or type that matches nothing is
an error listing what exists. Each spec is normalised into a
:class:`~quark.torch.quantization.tensor_quant.TensorQuant`.

Config flavours plug in with :func:`register_config_view` (the main API's ``Config`` here, the
Brevitas extension's in ``extensions/brevitas/normalise.py``). Pure data; no Brevitas import.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from torch import nn

from quark.torch.quantization.config import config as main
from quark.torch.quantization.config.algorithms import AlgoConfig
from quark.torch.quantization.config.spec import ROLES
from quark.torch.quantization.flavours import load_flavours
from quark.torch.quantization.tensor_quant import TensorQuant, normalise

#: subclasses of torch layers that compute exactly what their base class computes, by qualified
#: class name (no import of their library), quantized as the base: timm's ``Linear`` differs from
#: ``nn.Linear`` only under TorchScript (it casts the weights to the input's dtype)
EQUIVALENT_SUBCLASSES: dict[str, type[nn.Module]] = {"timm.layers.linear.Linear": nn.Linear}

#: the attribute where ``ModelQuantizer.quantize_model`` records the config of the model it returns
#: (AMD Quark's name): the targets read its mode, Quark's file formats write it beside the tensors
CONFIG_ATTRIBUTE = "quant_config"


def qualified_name(cls: type) -> str:
    """``module.QualName`` of a class: how tables name classes of libraries they do not import."""
    return f"{cls.__module__}.{cls.__qualname__}"


def layer_type(module: nn.Module) -> type[nn.Module]:
    """The type ``module`` is quantized as: its class, or the base of an equivalent subclass."""
    return EQUIVALENT_SUBCLASSES.get(qualified_name(type(module)), type(module))


@dataclass(frozen=True)
class Site:
    """A place a backend can quantize.

    Args:
        name: module path (or traced node name); what ``layer_quant_config`` and ``exclude`` match.
        type: what ``layer_type_quant_config`` keys match (by class or class name).
        roles: the tensor roles the site has (a Linear without bias has no ``bias``).
        module: the module, for rules that look at its weights; None for nodes without one.
        sources: for a role whose spec comes from other config roles, those roles in order of
            preference (graph mode: an activation's output takes ``output_tensors``, else
            ``input_tensors``); a role not listed takes the config role of its own name.
    """

    name: str
    type: type
    roles: tuple[str, ...]
    module: nn.Module | None = None
    sources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def sources_of(self, role: str) -> tuple[str, ...]:
        """The config roles that feed ``role`` at this site (the role itself unless the site maps it)."""
        return tuple(self.sources.get(role, (role,)))


@dataclass
class LayerPlan:
    """Effective quantization of one site: a spec (or None: float) for every role.

    ``origins`` names, per quantized role, the config field its spec came from
    (``global_quant_config.input_tensors``, ``layer_type_quant_config['ReLU'].output_tensors``,
    ...). ``upstream`` names, per role, the site whose quantizer provides that tensor (graph mode:
    a layer whose input arrives quantized has no input quantizer of its own; its spec is the
    upstream one). ``batch_norm`` names the batch norm folded into the layer during QAT (its
    weight spec's ``TQTSpec.fold_batch_norm``; set by the backend, which knows what follows the layer).
    """

    name: str
    module_type: type
    specs: dict[str, TensorQuant | None]
    target_device: Any = None
    origins: dict[str, str] = field(default_factory=dict)
    upstream: dict[str, str] = field(default_factory=dict)
    batch_norm: str | None = None

    @property
    def quantized(self) -> bool:
        return any(self.specs.values())


@dataclass(frozen=True)
class ConfigView:
    """What resolution and ``ModelQuantizer`` need from a config, whatever its flavour.

    ``mode`` selects the backend's rewriter (``QuantizationMode`` or the extension's ``Backend``);
    ``algorithms`` lists ``pre_quant_opt_config`` then ``algo_config``. ``signs_from_graph``: the
    flavour's specs say no sign (the Brevitas extension's), so graph mode follows Brevitas'
    convention: unsigned grids for what is never negative (the outputs of ReLU, ReLU6, Sigmoid,
    Hardsigmoid, and what only passes, pools, adds or concatenates them); the main API's dtype is
    honoured as written.
    """

    global_config: Any
    type_configs: dict[Any, Any]
    name_configs: dict[str, Any]
    exclude: list[str]
    mode: Enum
    algorithms: tuple[AlgoConfig, ...]
    signs_from_graph: bool = False


CONFIG_VIEWS: dict[type, Callable[[Any], ConfigView]] = {
    main.Config: lambda c: ConfigView(
        c.global_quant_config,
        c.layer_type_quant_config,
        c.layer_quant_config,
        c.exclude,
        c.quant_mode,
        (*c.pre_quant_opt_config, *(c.algo_config or ())),
    ),
}


def register_config_view(config_cls: type, view: Callable[[Any], ConfigView]) -> None:
    """Let ``ModelQuantizer`` and :func:`resolve` take ``config_cls`` (a config flavour registers itself)."""
    CONFIG_VIEWS[config_cls] = view


def config_view(config: Any) -> ConfigView:
    """The registered :class:`ConfigView` of ``config``'s class; an unregistered class is a ``TypeError``."""
    if type(config) not in CONFIG_VIEWS and load_flavours():  # an announced flavour, registered on first use
        return config_view(config)
    try:
        return CONFIG_VIEWS[type(config)](config)
    except KeyError:
        allowed = " or ".join(f"{c.__module__}.{c.__name__}" for c in CONFIG_VIEWS)
        raise TypeError(f"expected {allowed}, got {type(config).__name__}") from None


def config_specs(view: ConfigView) -> list[tuple[str, TensorQuant]]:
    """Every spec the config names, normalised without a model: errors in a spec surface before
    anything is changed. Returns (where, spec) pairs."""
    levels = [("global_quant_config", view.global_config)]
    levels += [(f"layer_type_quant_config[{_type_name(k)!r}]", c) for k, c in view.type_configs.items()]
    levels += [(f"layer_quant_config[{k!r}]", c) for k, c in view.name_configs.items()]
    return [
        (f"{label}.{role}", normalise(getattr(cfg, role), role, f"{label}.{role}"))
        for label, cfg in levels
        for role in ROLES
        if getattr(cfg, role) is not None
    ]


def module_sites(model: nn.Module, types: Collection[type[nn.Module]]) -> list[Site]:
    """One site per module of ``types``, outermost first; never one inside another."""
    sites: list[Site] = []
    inside: list[str] = []
    for name, module in model.named_modules():
        if not name or layer_type(module) not in types or any(name.startswith(p) for p in inside):
            continue
        inside.append(name + ".")
        has_bias = any(n.endswith("bias") and p is not None for n, p in module.named_parameters())
        sites.append(Site(name, layer_type(module), ROLES if has_bias else tuple(r for r in ROLES if r != "bias"), module))
    return sites


def module_names(model: nn.Module) -> list[str]:
    """Qualified names of every submodule of ``model`` (the root excluded)."""
    return [n for n, _ in model.named_modules() if n]


def resolve(
    config: Any, sites: Sequence[Site], known_names: Collection[str], supported_types: Collection[type]
) -> list[LayerPlan]:
    """Resolve ``config`` over ``sites``: one :class:`LayerPlan` per site not excluded.

    ``known_names`` are the module names ``exclude`` may name (it may name modules that are no
    sites, or that a pre-quantization step merged away); ``supported_types`` are the types the
    backend can quantize, for the messages. Raises ``ValueError`` (before anything is changed)
    when a name pattern, exclude pattern or layer type matches nothing, or a spec cannot be honoured.
    """
    view = config_view(config)
    present = {s.type.__name__: s.type for s in sites}
    supported = {t.__name__ for t in supported_types}
    for key in view.type_configs:
        tname = _type_name(key)
        if tname not in supported:
            raise ValueError(
                f"layer_type_quant_config[{tname!r}]: {tname} is not a quantizable layer type; "
                f"supported: {sorted(supported)}"
            )
        if tname not in present or (not isinstance(key, str) and present[tname] is not key):
            raise ValueError(
                f"layer_type_quant_config[{tname!r}] matches no module of the model; quantizable types present: "
                f"{sorted(present)}"
            )
    site_names = [s.name for s in sites]
    for pattern in view.name_configs:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in site_names):
            raise ValueError(
                f"layer_quant_config pattern {pattern!r} matches no quantizable module; "
                f"quantizable modules: {_preview(site_names)}"
            )
    names = list(dict.fromkeys([*known_names, *site_names]))
    for pattern in view.exclude:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            raise ValueError(f"exclude pattern {pattern!r} matches no module; modules: {_preview(names)}")
    return [_plan_site(site, view) for site in sites if not _excluded(site.name, view.exclude)]


def _type_name(key: Any) -> str:
    return key if isinstance(key, str) else key.__name__


def _excluded(name: str, patterns: list[str]) -> bool:
    parts = name.split(".")
    ancestors = [".".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatchcase(a, p) for a in ancestors for p in patterns)


def _plan_site(site: Site, view: ConfigView) -> LayerPlan:
    levels: list[tuple[str, Any]] = []
    exact = view.name_configs.get(site.name)
    if exact is not None:
        levels.append((f"layer_quant_config[{site.name!r}]", exact))
    else:
        pattern = next((p for p in view.name_configs if fnmatch.fnmatchcase(site.name, p)), None)
        if pattern is not None:
            levels.append((f"layer_quant_config[{pattern!r}]", view.name_configs[pattern]))
    levels += [
        (f"layer_type_quant_config[{_type_name(key)!r}]", cfg)
        for key, cfg in view.type_configs.items()
        if _type_name(key) == site.type.__name__
    ]
    levels.append(("global_quant_config", view.global_config))

    specs: dict[str, TensorQuant | None] = dict.fromkeys(ROLES)
    origins: dict[str, str] = {}
    for role in site.roles:
        # the most specific level that names any source of the role; within a level, sources in order
        label, source, spec = next(
            (
                (lbl, src, getattr(cfg, src))
                for lbl, cfg in levels
                for src in site.sources_of(role)
                if getattr(cfg, src) is not None
            ),
            ("", role, None),
        )
        if spec is not None:
            specs[role] = normalise(spec, role, f"{label}.{source} (module {site.name!r})")
            origins[role] = f"{label}.{source}"
    target = next((cfg.target_device for _, cfg in levels if getattr(cfg, "target_device", None)), None)
    return LayerPlan(site.name, site.type, specs, target, origins)


def _preview(names: list[str], limit: int = 30) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def _cell(plan: LayerPlan, role: str) -> str:
    if role in plan.upstream:
        return f"= {plan.upstream[role]}"
    spec = plan.specs[role]
    return spec.describe() if spec else "-"


def _type_cell(plan: LayerPlan) -> str:
    name = plan.module_type.__name__
    return f"{name} + {plan.batch_norm} (folded)" if plan.batch_norm else name


def format_plan(plans: list[LayerPlan]) -> str:
    """Plain-text table: one row per site, one column per role, '-' where a role stays float and
    '= site' where the tensor is quantized upstream, by that site; a batch norm folded into a
    layer during QAT follows its type."""
    headers = ("layer", "type", *ROLES)
    rows = [(p.name, _type_cell(p), *(_cell(p, r) for r in ROLES)) for p in plans]
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(headers), line("-" * w for w in widths), *map(line, rows)])
