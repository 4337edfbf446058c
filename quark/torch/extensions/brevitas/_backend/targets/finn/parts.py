"""FPGA parts the FINN dataflow estimates are checked against: resources per part.

Capacities come from FINN's own tables (``finn.util.platforms``: LUT, FF, BRAM_18K, URAM, DSP
per SLR, summed over SLRs; ``finn.util.basic.part_map``: board -> part), so the estimate and the
capacity use the same bookkeeping. FINN has no platform for the Kria K26 SOM (KV260), whose
figures are taken from its datasheet (cited in :data:`DATASHEET_PARTS`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: resource names, in the order of FINN's ``Platform.compute_resources`` rows
RESOURCES: tuple[str, ...] = ("LUT", "FF", "BRAM_18K", "URAM", "DSP")


@dataclass(frozen=True)
class FpgaPart:
    """One FPGA part and its capacity (whole device, all SLRs)."""

    part: str  # the Vivado part name FINN's SpecializeLayers takes
    boards: tuple[str, ...]
    capacity: dict[str, int]  # resource (RESOURCES) -> count
    source: str

    def describe(self) -> str:
        figures = ", ".join(f"{self.capacity[r]} {r}" for r in RESOURCES)
        return f"{self.part} ({'/'.join(self.boards)}): {figures}"


#: parts FINN has no Platform class for: part -> (boards, capacity, source)
DATASHEET_PARTS: dict[str, tuple[tuple[str, ...], dict[str, int], str]] = {
    # AMD DS987 (Kria K26 SOM data sheet), table "Programmable logic": 117,120 CLB LUTs, 234,240
    # CLB flip-flops, 144 block RAMs (36 Kb, = 288 BRAM_18K), 64 UltraRAMs, 1,248 DSP slices.
    "xck26-sfvc784-2LV-c": (
        ("KV260_SOM",),
        {"LUT": 117120, "FF": 234240, "BRAM_18K": 288, "URAM": 64, "DSP": 1248},
        "AMD DS987 (Kria K26 SOM data sheet)",
    ),
}


def _finn_parts() -> dict[str, FpgaPart]:
    from finn.util.basic import part_map
    from finn.util.platforms import platforms

    boards_of: dict[str, list[str]] = {}
    for board, part in part_map.items():
        if board in platforms:
            boards_of.setdefault(part, []).append(board)
    parts = {}
    for part, boards in boards_of.items():
        rows = platforms[boards[0]]().compute_resources
        capacity = {name: int(sum(row[i] for row in rows)) for i, name in enumerate(RESOURCES)}
        parts[part] = FpgaPart(part, tuple(boards), capacity, f"finn.util.platforms ({boards[0]})")
    return parts


def parts() -> dict[str, FpgaPart]:
    """Every known part by its Vivado name: FINN's platforms, then the datasheet ones."""
    table = _finn_parts()
    for part, (boards, capacity, source) in DATASHEET_PARTS.items():
        table.setdefault(part, FpgaPart(part, boards, capacity, source))
    return table


def resolve(name: str) -> FpgaPart:
    """The part called ``name``: a Vivado part name (``xc7z020clg400-1``), a board (``Pynq-Z1``) or
    a die (``xczu3eg``: the first known part of it). Another package or speed grade of a known die
    (``xczu3eg-sbva484-1-i``, Ultra96-V2) has the same resources and keeps its own name.

    Raises:
        ValueError: unknown name; lists the known parts and boards.
    """
    table = parts()
    if name in table:
        return table[name]
    for part in table.values():
        if name in part.boards:
            return part
    die = name.split("-")[0]
    for part in table.values():
        if part.part.split("-")[0] == die:
            same_die = die != name
            return (
                FpgaPart(name, part.boards, part.capacity, part.source + " (same die)") if same_die else part
            )
    known = "; ".join(p.describe().split(":")[0] for p in sorted(table.values(), key=lambda p: p.part))
    raise ValueError(f"part={name!r}: not a known FPGA part or board; known: {known}")
