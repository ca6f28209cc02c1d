#!/usr/bin/env bash
# vLLM on the lent GPU machine, brought by back-to-back device calls (benchmarks/gpu_call.sh --vllm runs this;
# docs/development/benchmarks.md gives the calls). Each call carries one piece of the trimmed bundle
# (`make wheels-vllm`: wheels-vllm/piece-N/, with its manifest) and this script:
#   1. checks the carried piece against its manifest and keeps it on the machine (a warm machine keeps /tmp);
#   2. once every piece is there: joins them, checks the archive and each wheel, and installs the wheels into a
#      folder of their own (pip install --no-index --no-deps --target), once per machine;
#   3. installs the proof's own wheel bundle (wheels/, trl and Unsloth) where it is carried, as gpu_call.sh does and
#      into the same folder, so a machine that ran the proof already has it;
#   4. runs benchmarks/gpu_vllm.py into --out (the imports on the GPU, vllm.LLM at 1.5B beside plain generate, one
#      colocated GRPO step through Unsloth's fast_inference at 8B), unless --no-run.
#
#   bash benchmarks/gpu_call.sh --vllm --out "$OUT"                # a call: its carried piece(s), then what can run
#   bash benchmarks/gpu_call.sh --vllm --out "$OUT" -- --parts vllm-llm   # arguments for gpu_vllm.py after --
#
# Options: --pieces DIR (default wheels-vllm/), --wheels DIR (default wheels/), --budget-s S (gpu_vllm.py's budget),
# --python PY (default $PYTHON or python3), --keep DIR (where pieces and the installed bundle are kept; default
# ${TMPDIR:-/tmp}/grpo_kit_vllm), --no-run (stop after installing: the rehearsal and the tests).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="${OUT:-}"
PIECES="$ROOT/wheels-vllm"
WHEELS="$ROOT/wheels"
KEEP="${TMPDIR:-/tmp}/grpo_kit_vllm"
PY="${PYTHON:-python3}"
BUDGET=()
RUN=1
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --vllm) shift;;
    --out) OUT_DIR="$2"; shift 2;;
    --pieces) PIECES="$2"; shift 2;;
    --wheels) WHEELS="$2"; shift 2;;
    --keep) KEEP="$2"; shift 2;;
    --python) PY="$2"; shift 2;;
    --budget-s) BUDGET=(--budget-s "$2"); shift 2;;
    --no-run) RUN=0; shift;;
    --) shift; EXTRA=("$@"); break;;
    *) echo "vllm_call.sh: unknown argument $1 (see the header of benchmarks/vllm_call.sh)" >&2; exit 2;;
  esac
done
if [ -z "$OUT_DIR" ]; then
  echo "vllm_call.sh: give --out DIR (on the device machine: --out \"\$OUT\", the folder that comes back)" >&2
  exit 2
fi
mkdir -p "$OUT_DIR" "$KEEP" || exit 2
LOG="$OUT_DIR/call.log"
echo "== vllm_call.sh $(date -u +%FT%TZ): pieces $PIECES, kept in $KEEP" | tee "$LOG"
PIECES_PY="$ROOT/benchmarks/vllm_pieces.py"

# 1. The pieces carried this call: each checked and kept.
for piece in "$PIECES"/piece-*; do
  [ -d "$piece" ] || continue
  "$PY" "$PIECES_PY" --check "$piece" 2>&1 | tee -a "$LOG"
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 2
done
"$PY" "$PIECES_PY" --store "$PIECES" --into "$KEEP/pieces" 2>&1 | tee -a "$LOG"
stored=${PIPESTATUS[0]}
if [ "$stored" -eq 3 ]; then
  echo "== vllm_call.sh done: pieces kept; carry the next one in the next call while this machine is warm" \
    | tee -a "$LOG"
  exit 0
fi
[ "$stored" -eq 0 ] || exit 2
FOLDER="$KEEP/pieces/$(cat "$KEEP/pieces/current")"

# 2. Every piece is here: join, check, install (once per machine and bundle).
SITE="$KEEP/site-$(basename "$FOLDER")"
if [ -f "$SITE/.installed" ]; then
  echo "vLLM's bundle is installed already in $SITE" | tee -a "$LOG"
else
  start=$(date +%s)
  rm -rf "$SITE" "$KEEP/wheels"
  "$PY" "$PIECES_PY" --assemble "$FOLDER" --wheels-out "$KEEP/wheels" 2>&1 | tee -a "$LOG"
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 2
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$KEEP"/wheels/*.whl \
    2>&1 | tee -a "$LOG"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "vllm_call.sh: installing vLLM's wheels failed" | tee -a "$LOG"; exit 3; }
  rm -rf "$KEEP/wheels"
  touch "$SITE/.installed"
  echo "joined, checked and installed vLLM's bundle into $SITE in $(( $(date +%s) - start )) s" | tee -a "$LOG"
fi

# 3. The proof's own wheels (trl, peft, Unsloth, bitsandbytes), into gpu_call.sh's folder for them.
KIT=""
if [ -f "$WHEELS/manifest.json" ]; then
  "$PY" "$ROOT/benchmarks/wheel_bundle.py" --check "$WHEELS" 2>&1 | tee -a "$LOG"
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 2
  KIT="${TMPDIR:-/tmp}/grpo_kit_gpu_proof/site-$(sha256sum "$WHEELS/manifest.json" | cut -c1-12)"
  if [ ! -f "$KIT/.installed" ]; then
    rm -rf "$KIT"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$KIT" "$WHEELS"/*.whl \
      2>&1 | tee -a "$LOG"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "vllm_call.sh: installing the proof's wheels failed" | tee -a "$LOG"; exit 3; }
    touch "$KIT/.installed"
  fi
  echo "the proof's wheels are in $KIT" | tee -a "$LOG"
else
  KIT="$(ls -td "${TMPDIR:-/tmp}"/grpo_kit_gpu_proof/site-*/.installed 2>/dev/null | head -1)"
  KIT="${KIT%/.installed}"
  if [ -n "$KIT" ]; then
    echo "the proof's wheels were not carried; installed already in $KIT" | tee -a "$LOG"
  else
    echo "the proof's wheels were not carried and none are installed: Unsloth's part is skipped" | tee -a "$LOG"
  fi
fi
export PYTHONPATH="$ROOT${KIT:+:$KIT}:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
echo "PYTHONPATH=$PYTHONPATH" | tee -a "$LOG"
if [ "$RUN" -eq 0 ]; then
  echo "== vllm_call.sh done: installed (--no-run)" | tee -a "$LOG"
  exit 0
fi

# 4. The vLLM part of the proof, into --out.
cd "$ROOT" || exit 2
"$PY" "$ROOT/benchmarks/gpu_vllm.py" --out "$OUT_DIR" "${BUDGET[@]}" "${EXTRA[@]}" 2>&1 | tee -a "$LOG"
status=${PIPESTATUS[0]}
echo "== vllm_call.sh done: exit $status; $OUT_DIR holds $(ls "$OUT_DIR" | tr '\n' ' ')" | tee -a "$LOG"
exit "$status"
