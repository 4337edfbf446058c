"""The benchmark entry point, ``benchmarks/run.py``, in quick mode on two of its benchmarks: the
table, the JSON and the plot hold the measured figures."""

from __future__ import annotations

import importlib.util
import json

import pytest
from _shared import REPO

RUN = REPO / "benchmarks" / "run.py"


def load_run():
    spec = importlib.util.spec_from_file_location("benchmarks_run", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_quick_run_writes_table_json_and_plot(tmp_path, capsys):
    out = tmp_path / "results"
    load_run().main(["--quick", "--only", "bit_sweep", "export", "--out", str(out)])
    printed = capsys.readouterr().out

    document = json.loads((out / "results.json").read_text())
    assert document["meta"]["quick"] is True and set(document["results"]) == {"bit_sweep", "export"}
    sweep = document["results"]["bit_sweep"]
    assert sweep["bits"] == [2, 3, 4, 6, 8]
    for accuracies in sweep["accuracy"].values():
        assert len(accuracies) == 5 and all(0 <= a <= 100 for a in accuracies)
        assert accuracies[-1] >= sweep["float_accuracy"] - 2  # 8 bits: near float
        assert accuracies[-1] > accuracies[0]  # 2 bits lose accuracy on this CNN (measured: 22.8 % W2A2)
    exports = document["results"]["export"]["rows"]
    assert len(exports) == 8 and all(row["exported"] == "yes" and row["s"] > 0 for row in exports)

    # the printed table is the JSON's table, one line per row
    for row in document["table"]:
        assert any(row["item"] in line and row["value"] in line for line in printed.splitlines())
    assert sum(row["benchmark"] == "bit_sweep" for row in document["table"]) == 10

    import matplotlib.image

    plot = out / "accuracy_vs_bits.png"
    assert document["plots"] == [plot.name] and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(plot)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100 and pixels.std() > 0.05  # drawn, not blank
