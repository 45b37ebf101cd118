# One GPU-suite stage by its pytest arguments (forktool/gpu_suite.txt), on the
# device with the fork overlaid; upstream's test files come from
# .carry/scripts/ut (copies from build/vllm-fork/tests; attention_utils.py is
# tests/v1/attention/utils.py; prepare_stage_files.sh writes them here, and the
# call carries ".carry/scripts" too).  Usage: call_stage.sh STAGE [LIMIT_S]
cd "$(dirname "$0")/../.."
STAGE=$1; LIMIT=${2:-480}
[ -d .carry/scripts/ut ] || { echo "no .carry/scripts/ut: run experiments/device/prepare_stage_files.sh here and carry .carry/scripts"; exit 2; }
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1
mapfile -t ARGS < <(python3 - "$STAGE" <<'PY'
import sys, os
from pathlib import Path
sys.path.insert(0, ".")
from forktool.suites import read_suite
for a in read_suite(Path("forktool/gpu_suite.txt"), sys.argv[1]):
    base = a.split("::")[0]
    if base.endswith(".py") and not os.path.exists(base):
        a = ".carry/scripts/ut/" + os.path.basename(base) + a[len(base):]
    print(a)
PY
)
# Upstream test helpers the fork's tests import (tests.v1.attention.utils).
[ -f tests/v1/attention/utils.py ] || cp .carry/scripts/ut/attention_utils.py tests/v1/attention/utils.py
echo "stage $STAGE: ${ARGS[*]}"
T0=$(date +%s)
set -o pipefail
# (pytest's last line, "N passed, M warnings in S s", is kept.)
timeout -s INT $LIMIT python3 -m pytest -v -rA -p no:cacheprovider --tb=short "${ARGS[@]}" 2>&1 \
  | awk '/ in [0-9.]+s/ && /passed|failed|error/ {print; next}
         tolower($0) ~ /warning|it\/s\]|^info/ {next} {print}' > $OUT/stage_$STAGE.txt
echo "stage $STAGE: rc=$? wall $(( $(date +%s) - T0 )) s"
tail -25 $OUT/stage_$STAGE.txt
