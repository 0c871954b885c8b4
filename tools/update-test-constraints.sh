#!/usr/bin/env bash
# Write tools/test-constraints.txt again: what pip would install from tools/test-requirements.txt
# into a new virtualenv, resolved with the versions the test environment (.venv) holds now as
# constraints (pip's resolver gives up on the open ranges alone). To move a package on,
# upgrade it in .venv first (pip install -U NAME), run the suite, then run this.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${OFINDEX_VENV:-.venv}
PY=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$VENV/bin/python" -m pip freeze --exclude-editable | grep -v -i -e '^ofindex' -e ' @ ' \
  > "$work/seed.txt"
"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
"$work/venv/bin/python" -m pip install -q --dry-run --ignore-installed --report "$work/report.json" \
  -c "$work/seed.txt" --build-constraint tools/build-constraints.txt -r tools/test-requirements.txt
"$work/venv/bin/python" - "$work/report.json" tools/test-constraints.txt <<'PYEOF'
import json
import sys

report, target = sys.argv[1], sys.argv[2]
with open(target, encoding="utf-8") as f:
    head = "".join(line for line in f if line.startswith("#"))
pins = sorted((f"{item['metadata']['name']}=={item['metadata']['version']}"
               for item in json.load(open(report, encoding="utf-8"))["install"]
               if item["metadata"]["name"].lower() != "ofindex"), key=str.lower)
with open(target + ".tmp", "w", encoding="utf-8") as f:
    f.write(head + "\n".join(pins) + "\n")
import os
os.replace(target + ".tmp", target)
print(f"{target}: {len(pins)} packages")
PYEOF
