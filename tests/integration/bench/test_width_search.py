"""``benchmarks/width_search.py``'s check of issue 19's goal, on made-up confirmed figures: a point
25 % below W4A4's LUTs within 0.5 points passes, one a hair outside either bound fails, and higher
accuracy counts only at no more LUTs. (The benchmark itself: ``logs/width_search_*.txt``.)"""

from __future__ import annotations

import importlib.util
import sys

from _shared import REPO


def _goal():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("width_search", REPO / "benchmarks" / "width_search.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.goal
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def test_the_goal_check_passes_only_points_inside_its_bounds():
    figures = {  # name -> (accuracy, LUT) as confirm() measured them
        "W4A4": (99.0, 4000.0),
        "cut_25": (98.5, 3000.0),  # exactly 25 % fewer, exactly 0.5 points lower: met
        "cut_too_little": (99.0, 3001.0),  # 24.98 % fewer
        "too_inaccurate": (98.49, 2000.0),  # 0.51 points lower
        "better_same_lut": (99.1, 4000.0),  # higher accuracy at no more LUTs: met
        "better_dearer": (99.5, 4001.0),
        "equal": (99.0, 3500.0),  # neither branch
    }
    confirmed = {name: {"accuracy": acc, "estimate": {"LUT": lut}} for name, (acc, lut) in figures.items()}
    points = [{"name": name, "uniform": name == "W4A4"} for name in figures]
    base, met = _goal()(confirmed, points)
    assert base is confirmed["W4A4"]
    assert [(name, why) for name, _, _, why in met] == [
        ("cut_25", "25 % fewer LUTs"),
        ("better_same_lut", "higher accuracy at no more LUTs"),
    ]
