"""``benchmarks/finn_executor.py`` on a few images: both engines timed on the demo's dataflow, their
outputs identical, and ``benchmarks/run.py`` turning the result into its table rows."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from _shared import REPO

pytest.importorskip("finn.transformation.fpgadataflow.create_dataflow_partition", reason="finn-plus is not installed")


def load(name: str):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


@pytest.mark.slow
def test_both_engines_timed_side_by_side_with_identical_outputs():
    result = load("finn_executor").measure(images=300, finn_images=6, repeats=2, float_epochs=1)
    assert result["identical_outputs"] and result["images"] == 300 and result["finn_images"] == 6
    assert result["batched_s"] > 0 and result["finn_s_per_image"] > 0 and len(result["batched_s_runs"]) == 2
    assert result["ratio"] == pytest.approx(result["finn_s_all_images"] / result["batched_s"])
    rows = load("run").ROWS["finn_executor"](result)
    assert [row[0] for row in rows] == ["finn_executor"] * 3
    assert rows[-1][-1].endswith("x, True")
