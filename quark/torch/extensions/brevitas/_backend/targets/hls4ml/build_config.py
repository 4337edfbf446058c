"""The settings of an hls4ml project, as one frozen object: :class:`Hls4mlBuildConfig`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from enum import Enum
from typing import Any

from quark.common.errors import RefusedError


class IOType(Enum):
    """hls4ml's ``io_type``: every tensor as an array (``io_parallel``) or as streams (``io_stream``)."""

    io_parallel = "io_parallel"
    io_stream = "io_stream"


class Strategy(Enum):
    """hls4ml's ``Strategy``: every multiplication in parallel (``latency``) or shared by the reuse
    factor (``resource``)."""

    latency = "Latency"
    resource = "Resource"


class Hls4mlConfigError(RefusedError):
    """A setting of an hls4ml project that cannot be used (named with what is allowed)."""


#: hls4ml backends that write Xilinx HLS C++ (compiled and run here by g++, synthesised by the user's tools)
BACKENDS = ("Vitis", "Vivado")


@dataclass(frozen=True)
class Hls4mlBuildConfig:
    """An hls4ml project's settings; every layer's precisions are not among them: they follow from the
    quantizers (:mod:`.precision`).

    ``part`` and ``clock_period_ns`` go to the HLS project (hls4ml's Vitis defaults); ``reuse_factor``
    is how many times each multiplier is reused (1: fully parallel).
    """

    io_type: IOType = IOType.io_parallel
    strategy: Strategy = Strategy.latency
    reuse_factor: int = 1
    backend: str = "Vitis"
    part: str = "xcvu13p-flga2577-2-e"
    clock_period_ns: float = 5.0
    project_name: str = "myproject"

    def __post_init__(self) -> None:
        for name, kind in (("io_type", IOType), ("strategy", Strategy)):
            value = getattr(self, name)
            if not isinstance(value, kind):
                try:
                    object.__setattr__(self, name, kind(value) if value in {k.value for k in kind} else kind[value])
                except KeyError:
                    raise Hls4mlConfigError(
                        f"Hls4mlBuildConfig.{name}={value!r}: allowed {[k.name for k in kind]}"
                    ) from None
        if isinstance(self.reuse_factor, bool) or not isinstance(self.reuse_factor, int) or self.reuse_factor < 1:
            raise Hls4mlConfigError(f"Hls4mlBuildConfig.reuse_factor={self.reuse_factor!r}: allowed an integer >= 1")
        if self.backend not in BACKENDS:
            raise Hls4mlConfigError(f"Hls4mlBuildConfig.backend={self.backend!r}: allowed {list(BACKENDS)}")
        if not (isinstance(self.clock_period_ns, (int, float)) and self.clock_period_ns > 0):
            raise Hls4mlConfigError(f"Hls4mlBuildConfig.clock_period_ns={self.clock_period_ns!r}: allowed a number > 0")
        if not self.project_name.isidentifier():
            raise Hls4mlConfigError(
                f"Hls4mlBuildConfig.project_name={self.project_name!r}: allowed a C++ identifier (it names the top function)"
            )

    def replace(self, **changes: Any) -> Hls4mlBuildConfig:
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise Hls4mlConfigError(f"Hls4mlBuildConfig: unknown settings {unknown}; allowed {[f.name for f in fields(self)]}")
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["io_type"], values["strategy"] = self.io_type.value, self.strategy.value
        return values
