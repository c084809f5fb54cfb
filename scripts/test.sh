#!/usr/bin/env bash
# The whole test suite: what `make test` runs, and so what CI runs.
#   0. the layer rules of DESIGN.md (tools/layers.txt) against the real #include graph
#   1. the optimized build's unit tests (Criterion), the Qwen2.5-Coder goldens included
#   2. the same tests built with ASan + UBSan (leaks fail the run), all but the real-model
#      suites (golden_qwen: the 0.5B and 1.5B goldens; spec_models: speculative decoding
#      on every shipped model): those models through -O1 sanitized kernels would take
#      minutes; every kernel family is checked against ref bit for bit on other tests,
#      and speculation on stories260K in the spec suite)
#   3. allocation-failure injection (build-san/tests/alloc_fail): every allocation of
#      model load, tokenizer, engine and HTTP requests fails once in turn; see the file
#   4. the optimized unit tests again, forced onto the portable kernel paths
#      (CINDER_ISA=avx2, then the scalar reference: CINDER_ISA=ref), and, where the
#      default is the AMX family, onto plain AVX-512 too (CINDER_ISA=avx512); these
#      also leave those two suites out (the scalar ref alone would take minutes)
#   5. on x86_64 hosts, the arm64 cross check: the NEON kernels built by
#      aarch64-linux-gnu-gcc and compared with ref under qemu-aarch64 (make cross-arm64)
#   6. the library as users get it: make install, examples/ and tests/api built against the
#      installed library with pkg-config, pip install ./python in a fresh virtualenv, the
#      README's Python example and python/tests (scripts/test_installed.sh)
#   7. the python checks against independent implementations (pytest)
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}

echo "== layer rules (make check-layers: tools/layers.txt against the #include graph) =="
make -s check-layers

make -j"$JOBS" all
make -j"$JOBS" SAN=1 all
NOT_BIG='!(golden_qwen|spec_models)/*'

echo "== unit tests (optimized) == (${SECONDS} s)"
./build/test_unit --jobs "$JOBS"

echo "== unit tests (ASan + UBSan) == (${SECONDS} s)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    LSAN_OPTIONS=suppressions=tests/lsan.supp:print_suppressions=0 \
    ./build-san/test_unit --jobs "$JOBS" --filter="$NOT_BIG"

echo "== allocation-failure injection (ASan + UBSan) == (${SECONDS} s)"
ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=tests/lsan.supp:print_suppressions=0 \
    ./build-san/tests/alloc_fail
echo "== the public API (tests/api/api_test.c, ASan + UBSan) == (${SECONDS} s)"
ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=tests/lsan.supp:print_suppressions=0 \
    ./build-san/tests/api_test "${CINDER_TESTDATA:-../shared/testdata}/models" tests/golden/stories260k.json

ISAS="avx2 ref"
if ./build/cinder version 2>/dev/null | grep -q "kernels amx"; then ISAS="avx512 $ISAS"; fi
for isa in $ISAS; do
    echo "== unit tests (CINDER_ISA=$isa) == (${SECONDS} s)"
    CINDER_ISA=$isa ./build/test_unit --jobs "$JOBS" --filter="$NOT_BIG"
done

case "$(uname -m)" in
x86_64)
    echo "== arm64 cross check (NEON kernels vs ref, under qemu-aarch64) == (${SECONDS} s)"
    make -j"$JOBS" cross-arm64 BUILD=build ;;
aarch64)
    echo "== arm64 cross check: skipped on an aarch64 host (the unit tests above ran the NEON family natively) == (${SECONDS} s)" ;;
*)
    echo "== arm64 cross check: skipped, not set up for a $(uname -m) host == (${SECONDS} s)" ;;
esac

echo "== the installed library: C examples, the API test, the Python package in a fresh virtualenv == (${SECONDS} s)"
./scripts/test_installed.sh

echo "== python checks == (${SECONDS} s)"
CINDER_BIN=./build/cinder CINDER_SAN_BIN=./build-san/cinder python3 -m pytest -q tests/py
echo "== done in ${SECONDS} s =="
