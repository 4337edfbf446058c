#!/usr/bin/env bash
# The command line's whole journey (docs/cli.md): a user's model file and data -> a FINN dataflow
# directory (W4A4, trained thresholds) and a QDQ file for AMD NPUs, with configs made by `init`.
# Run by tests/integration/cli/test_examples_cli.py.
#
#   bash examples/cli/journey.sh [WORKDIR]       (default: a new temporary directory)
#
# QUARK_BREVITAS (default quark-brevitas) and PYTHON (default python) name the commands.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${1:-$(mktemp -d)}"
QB=${QUARK_BREVITAS:-quark-brevitas}
PY=${PYTHON:-python}
mkdir -p "$WORK" && cd "$WORK"
cp "$HERE/mycnn.py" .
$PY mycnn.py                      # the user's side: mycnn_float.pt (trained), calib.npz, test.npz

# FPGA (FINN): W4A4, thresholds trained for two epochs, then QONNX and a dataflow directory
$QB init --preset finn --bits 4 --tqt > finn.yaml
$QB quantize --config finn.yaml --model mycnn.py:build --data calib.npz -o finn_q.pt
$QB evaluate --checkpoint finn_q.pt --data-module mycnn.py:loaders   # PTQ beside float, held out
$QB train --checkpoint finn_q.pt --data-module mycnn.py:loaders --epochs 2 --freeze -o finn_qat.pt
$QB evaluate --checkpoint finn_qat.pt --data-module mycnn.py:loaders
$QB export --checkpoint finn_qat.pt --format qonnx --data test.npz -o out/mycnn.qonnx.onnx
$QB export --checkpoint finn_qat.pt --format finn --data test.npz --batch-size 512 -o out/finn \
           --part Pynq-Z1 --target-fps 10000 --integer-input

# AMD NPU (Ryzen AI): XINT8, a QDQ file checked for the NPU, then verified again on its own
$QB init --preset xint8 --graph > xint8.yaml    # graph mode: the residual addition quantized too
$QB quantize --config xint8.yaml --model mycnn.py:build --data calib.npz -o xint8_q.pt
$QB export --checkpoint xint8_q.pt --format qdq --data test.npz -o out/mycnn.qdq.onnx
$QB verify --checkpoint xint8_q.pt --onnx out/mycnn.qdq.onnx --data test.npz

echo "done in $WORK: out/finn (FINN dataflow directory, see its README.md), out/mycnn.qdq.onnx (QDQ)"
