#!/usr/bin/env bash
# infra/tool-venv.sh NAME: a virtualenv of its own for a client tool the tests drive for real
# (pgcli), installed from the pinned list infra/tools/NAME.txt into .tools/NAME, and its path
# printed on stdout. The tool's dependencies never meet the project's (.venv pins its own psycopg,
# sqlglot, ...). Idempotent: a venv whose stamp records the list's hash is left as it is, so a
# warm machine pays one sha256sum; a changed list rebuilds it from scratch. No prompts (CI has no
# stdin). Tests call it from their fixtures; `make tools` runs it by hand.
set -euo pipefail

name=${1:?usage: infra/tool-venv.sh NAME}
root="$(cd "$(dirname "$0")/.." && pwd)"
reqs="$root/infra/tools/$name.txt"
[ -f "$reqs" ] || { echo "no pinned list $reqs" >&2; exit 2; }
dir="${ICEGRES_TOOLS_DIR:-$root/.tools}/$name"
python=${ICEGRES_TOOL_PYTHON:-python3}

want="$(sha256sum "$reqs" | cut -d' ' -f1)"
if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; then
  echo "$dir"
  exit 0
fi

echo "installing $name into $dir" >&2
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
# The stamp is written last: an interrupted install has none and is built again next time. (A
# venv cannot be built elsewhere and moved into place: its scripts name their interpreter by path.)
"$python" -m venv "$dir"
"$dir/bin/python" -m pip install -q --disable-pip-version-check --no-input -r "$reqs" >&2
echo "$want" > "$dir/.stamp"
echo "$dir"
