#!/usr/bin/env bash
# The whole command of the GPU proof on a lent GPU machine, in one device call (docs/development/benchmarks.md gives
# the exact call, the paths to carry and the time limit):
#   1. check that the carried wheel bundle is the one its manifest lists and fits one call with the tree;
#   2. install it into a folder of its own, put on PYTHONPATH after the tree (the machine's packages stay as they are);
#   3. run benchmarks/gpu_proof.py into the given folder ($OUT on the device machine), each part's row appended to
#      raw.jsonl as it finishes, within the budget, after restoring the compile caches an earlier loan brought back
#      (--caches), and ending with this machine's caches packed into compile-cache.tar.gz there.
#
#   bash benchmarks/gpu_call.sh --out "$OUT"                   # on the GPU machine: a loan's first call
#   bash benchmarks/gpu_call.sh --rerun --out "$OUT"           # a second call on the same warm machine
#   bash benchmarks/gpu_call.sh --out "$OUT" --caches FILE -- --done RAW_JSONL...   # the next loan's call
#   bash benchmarks/gpu_call.sh --miniature --out /tmp/proof   # the same steps on a CPU at toy shapes (make test)
#
# Options: --wheels DIR (default wheels/, made by `make wheels`), --budget-s S (default gpu_proof.py's: its call's
# budget, or its rerun budget), --caches FILE (a compile-cache.tar.gz a call brought back), --python PY (default
# $PYTHON or python3), and after `--` arguments for gpu_proof.py (e.g. -- --routes a100-peft eval). The bundle is
# installed once per machine (a marker holds the manifest's hash), so a rerun on the same warm machine starts at once.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# --vllm (anywhere before `--`): vLLM's trimmed bundle carried a piece a call, then the vLLM part of the proof, a mode
# of its own (benchmarks/vllm_call.sh takes the arguments; docs/development/benchmarks.md, "vLLM on the machine").
for arg in "$@"; do case "$arg" in --vllm) exec bash "$ROOT/benchmarks/vllm_call.sh" "$@";; --) break;; esac; done
OUT_DIR="${OUT:-}"
WHEELS="$ROOT/wheels"
BUDGET=()
PY="${PYTHON:-python3}"
MINIATURE=()
RERUN=()
CACHES=()
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT_DIR="$2"; shift 2;;
    --wheels) WHEELS="$2"; shift 2;;
    --budget-s) BUDGET=(--budget-s "$2"); shift 2;;
    --rerun) RERUN=(--rerun); shift;;
    --caches) CACHES=(--caches "$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"); shift 2;;
    --python) PY="$2"; shift 2;;
    --miniature) MINIATURE=(--miniature); shift;;
    --) shift; EXTRA=("$@"); break;;
    *) echo "gpu_call.sh: unknown argument $1 (see the header of benchmarks/gpu_call.sh)" >&2; exit 2;;
  esac
done
if [ -z "$OUT_DIR" ]; then
  echo "gpu_call.sh: give --out DIR (on the device machine: --out \"\$OUT\", the folder that comes back)" >&2
  exit 2
fi
mkdir -p "$OUT_DIR" || exit 2
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
LOG="$OUT_DIR/call.log"
echo "== gpu_call.sh $(date -u +%FT%TZ): wheels $WHEELS ${BUDGET[*]} ${MINIATURE[*]} ${RERUN[*]} ${CACHES[*]}" \
  | tee "$LOG"

# 1. The bundle: the wheels its manifest lists, under the size limit with the tree.
"$PY" "$ROOT/benchmarks/wheel_bundle.py" --check "$WHEELS" 2>&1 | tee -a "$LOG"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 2

# 2. Installed beside the machine's packages, never over them (--no-deps: exactly the carried wheels), once per
#    machine and bundle: a rerun on the same machine finds them.
SITE="${TMPDIR:-/tmp}/grpo_kit_gpu_proof/site-$(sha256sum "$WHEELS/manifest.json" | cut -c1-12)"
if [ -f "$SITE/.installed" ]; then
  echo "the bundle is installed already in $SITE" | tee -a "$LOG"
else
  start=$(date +%s)
  rm -rf "$SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl \
    2>&1 | tee -a "$LOG"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "gpu_call.sh: installing the wheels failed" | tee -a "$LOG"; exit 3; }
  touch "$SITE/.installed"
  echo "installed $(ls "$WHEELS"/*.whl | wc -l) wheels into $SITE in $(( $(date +%s) - start )) s" | tee -a "$LOG"
fi
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# 3. The proof, into the given folder, from the tree's root (Unsloth writes its generated modules there).
cd "$ROOT" || exit 2
"$PY" "$ROOT/benchmarks/gpu_proof.py" --out "$OUT_DIR" "${BUDGET[@]}" "${MINIATURE[@]}" "${RERUN[@]}" "${CACHES[@]}" \
  "${EXTRA[@]}" 2>&1 | tee -a "$LOG"
status=${PIPESTATUS[0]}
echo "== gpu_call.sh done: exit $status; $OUT_DIR holds $(ls "$OUT_DIR" | tr '\n' ' ')" | tee -a "$LOG"
exit "$status"
