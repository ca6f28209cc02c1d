#!/usr/bin/env bash
# Print the path of a Python of the version given (default 3.12, the lent GPU machine's) that can make a virtual
# environment, looking where a machine keeps one: pythonX.Y on PATH (a pyenv shim of a version not selected fails its
# check and is passed over), then pyenv's, uv's and the system's folders. None found: one line on standard error that
# says how to give it one, and exit 1. `make gpu-rehearsal` calls it unless REHEARSAL_PYTHON names one.
#
#   bash benchmarks/find_python.sh 3.12
set -u
want="${1:-3.12}"
works() {  # the interpreter runs, is version $want, and has venv with pip (ensurepip)
  [ -x "$1" ] && "$1" -c "import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != tuple(map(int, '$want'.split('.'))))" \
    >/dev/null 2>&1
}
candidates=("$(command -v "python$want" 2>/dev/null)")
for root in "${PYENV_ROOT:-$HOME/.pyenv}/versions" "$HOME/.local/share/uv/python"; do
  # newest patch release first
  for dir in $(ls -d "$root"/*"$want"* 2>/dev/null | sort -V -r); do
    candidates+=("$dir/bin/python$want")
  done
done
candidates+=("/usr/local/bin/python$want" "/usr/bin/python$want")
for py in "${candidates[@]}"; do
  if [ -n "$py" ] && works "$py"; then
    echo "$py"
    exit 0
  fi
done
echo "no Python $want with venv found (PATH, ${PYENV_ROOT:-$HOME/.pyenv}/versions, ~/.local/share/uv/python, /usr/bin): install one (pyenv install $want, uv python install $want, or apt-get install python$want-venv) or name it: make gpu-rehearsal REHEARSAL_PYTHON=/path/to/python$want" >&2
exit 1
