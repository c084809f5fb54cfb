#!/usr/bin/env bash
# The whole test suite: what `make test` runs, and so what CI runs.
#   1. the optimized build's unit tests (Criterion)
#   2. the same tests built with ASan + UBSan (leaks fail the run)
#   3. the optimized unit tests again, forced onto the portable kernel paths
#      (CINDER_ISA=avx2, then the scalar reference: CINDER_ISA=ref)
#   4. the python checks against independent implementations (pytest)
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}

make -j"$JOBS" all
make -j"$JOBS" SAN=1 all

echo "== unit tests (optimized) =="
./build/test_unit --jobs "$JOBS"

echo "== unit tests (ASan + UBSan) =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    LSAN_OPTIONS=suppressions=tests/lsan.supp:print_suppressions=0 \
    ./build-san/test_unit --jobs "$JOBS"

for isa in avx2 ref; do
    echo "== unit tests (CINDER_ISA=$isa) =="
    CINDER_ISA=$isa ./build/test_unit --jobs "$JOBS"
done

echo "== python checks =="
CINDER_BIN=./build/cinder CINDER_SAN_BIN=./build-san/cinder python3 -m pytest -q tests/py
