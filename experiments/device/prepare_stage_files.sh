#!/usr/bin/env bash
# Here, before a call_stage.sh / call_gdn_sync.sh call: copy the upstream test
# files that forktool/gpu_suite.txt names and this repository lacks from the
# materialized fork tree into .carry/scripts/ut (by base name, as call_stage.sh
# looks them up), with tests/v1/attention/utils.py as attention_utils.py; then
# carry ".carry/scripts" with ".carry/vllm026" and "dist/patches".
# Needs `make install` (build/vllm-fork).
set -euo pipefail
cd "$(dirname "$0")/../.."
T=build/vllm-fork
[ -d "$T/tests" ] || { echo "no $T/tests: run make install first" >&2; exit 1; }
mkdir -p .carry/scripts/ut
python3 - "$T" <<'PY'
import shutil, sys
from pathlib import Path
sys.path.insert(0, ".")
from forktool.suites import read_suite, stages_of
tree, out, suite = Path(sys.argv[1]), Path(".carry/scripts/ut"), Path("forktool/gpu_suite.txt")
files = {a.split("::")[0] for s in stages_of(suite) for a in read_suite(suite, s)}
for f in sorted(p for p in files if p.endswith(".py") and not Path(p).exists()):
    shutil.copy2(tree / f, out / Path(f).name)
shutil.copy2(tree / "tests/v1/attention/utils.py", out / "attention_utils.py")
PY
ls .carry/scripts/ut
