"""``benchmarks/quark_ptq_time.py`` without AMD's environment: the skip when it cannot be had (here
and in ``benchmarks/run.py``), failures reported by name with their error's first line, and the
client itself in this environment (a transformers model quantized through the extension's API)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from _shared import REPO


def load(name: str, module: str):
    spec = importlib.util.spec_from_file_location(module, REPO / "benchmarks" / name)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module] = loaded  # run.py imports it by name
    spec.loader.exec_module(loaded)
    return loaded


@pytest.fixture
def bench():
    return load("quark_ptq_time.py", "quark_ptq_time")


def test_missing_environment_is_a_skip_with_its_reason(bench, tmp_path, capsys):
    result = bench.main(["--no-create", "--amd-venv", str(tmp_path / "absent")])
    printed = capsys.readouterr().out
    assert "skipped" in result and "absent" in result["skipped"]
    assert printed.startswith("skipped: AMD Quark's environment is not available") and "absent" in printed


def test_run_py_reports_the_skip_as_a_row(bench, monkeypatch):
    run = load("run.py", "benchmarks_run_quark_ptq")
    assert "quark_ptq" in run.OPT_IN and "quark_ptq" in run.BENCHMARKS

    def unavailable(*args, **kwargs):
        raise bench.Unavailable("`pip install torch==2.13.0` failed: no network")

    monkeypatch.setattr(bench, "measure", unavailable)
    result = run.BENCHMARKS["quark_ptq"][1](True)
    assert run.ROWS["quark_ptq"](result) == [
        ("quark_ptq", "AMD Quark's extension", "skipped", "`pip install torch==2.13.0` failed: no network")
    ]


def test_failures_are_named_in_the_table(bench):
    ran = {"quantize_s": 2.0, "second_s": 1.0, "import_and_quantize_s": 2.5, "build_s": 0.1, "import_s": 0.5,
           "rel_error": 0.03}
    amd = dict(ran, quantize_s=4.0, second_s=1.0)
    rows = [
        bench._row("resnet", "W8A8 per tensor", {"AMD": [amd] * 3, "ours": [ran] * 3}),
        bench._row("vit", "W8A8 per tensor", {"AMD": [{"error": "KeyError: 'x'"}] * 3, "ours": [ran] * 3}),
    ]
    assert rows[0]["ratio"] == 0.5 and rows[0]["second ratio"] == 1.0
    assert rows[1]["ratio"] is None and rows[1]["AMD error"] == "KeyError: 'x'"
    version = {"python": "3.11", "torch": "2.13.0", "brevitas": "0.13.4", "transformers": "5.23.0",
               "quark": "0.13", "quark_path": "q", "backends": ["layerwise"]}
    meta = {"command": "python x", "versions": {"AMD": version, "ours": version}, "threads": 1, "runs": 3,
            "backend": "layerwise", "load_average_start": (1.0,), "load_average_end": (1.0,), "cpus": 2}
    text = bench.render({"meta": meta, "rows": rows})
    assert "vit W8A8 per tensor, AMD failed: KeyError: 'x'" in text
    assert "0.50x" in text and "first quantize_model in a process: 0.50x to 0.50x" in text


def test_first_error_line_is_the_exception():
    bench = load("quark_ptq_time.py", "quark_ptq_time")
    traceback = (
        "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n    f()\n"
        "AttributeError: 'Tensor' object has no attribute 'rename'\n"
    )
    assert bench._first_error_line(traceback) == "AttributeError: 'Tensor' object has no attribute 'rename'"


@pytest.mark.slow
def test_client_quantizes_a_transformers_model_here(bench):
    envs = bench._environments(REPO, REPO, threads=1)  # the AMD entry is unused
    python, env = sys.executable, envs["ours"][1]
    result = bench._run_client(python, env, ["--client", "resnet", "W8A8 per tensor", "layerwise", "1"], 600)
    assert "error" not in result, result
    assert result["quantize_s"] > 0 and result["second_s"] > 0 and result["build_s"] > 0
    assert 0 < result["rel_error"] < 0.1  # quantized (not float), and close to float (measured 0.036)
