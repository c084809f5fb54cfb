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
#      (two shards side by side, each failing every other allocation)
#   4. the optimized unit tests again, forced onto the portable kernel paths
#      (CINDER_ISA=avx2, then the scalar reference: CINDER_ISA=ref), and, where the
#      default is the AMX family, onto plain AVX-512 too (CINDER_ISA=avx512); these
#      also leave out the two real-model suites (the scalar ref alone would take
#      minutes) and the suites that cannot reach a kernel (ISA_FREE below: they give
#      the same result under every family, and run in 1 and 2)
#   5. on x86_64 hosts, the arm64 cross check: the NEON kernels built by
#      aarch64-linux-gnu-gcc and compared with ref under qemu-aarch64 (make cross-arm64)
#   6. the library as users get it: make install, examples/ and tests/api built against the
#      installed library with pkg-config, pip install ./python in a fresh virtualenv, the
#      README's Python example and python/tests (scripts/test_installed.sh)
#   7. the python checks against independent implementations (pytest), over both builds
#
# The phases run side by side as soon as what they need is built (the machine's cores
# are the limit: a phase that waits on a server or runs one thread leaves a core to
# another). Each phase writes to build/test-logs/NAME.log; this script prints each log
# whole when the phase ends, in the order above, then a table of every phase's time.
# Any failing phase fails the run (the others still finish and are printed).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
LOGS=build/test-logs
T0=$SECONDS

# Suites that cannot reach a kernel: nothing they link calls into src/core/cpu.c, where
# CINDER_ISA is read, so the family changes nothing for them (tests/py/test_test_script.py
# holds this list to the built objects' symbols).
ISA_FREE='chat|chat_fuzz|chat_jinja|chat_turn|fim|gguf|gguf_corrupt|gguf_fuzz|grammar|grammar_choice|grammar_gbnf|grammar_regex|grammar_tools|jinja|json_schema|metrics|rng|sampling_chain|sampling_draws|sampling_params|sampling_props|sampling_vocab|sampling_worked|stop|tokenizer_bad|tokenizer_detok|tokenizer_pretok|tokenizer_roundtrip|tokenizer_special|tokenizer_vectors|toolcall'
NOT_BIG='!(golden_qwen|spec_models)/*'
SAN_ENV=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
         LSAN_OPTIONS=suppressions=tests/lsan.supp:print_suppressions=0)

declare -A PID START END RC
ORDER=()
trap 'jobs -p | xargs -r kill 2>/dev/null || true' EXIT # a failed build leaves no phase running
start() { # start NAME COMMAND...: runs in the background, output to $LOGS/NAME.log
    local name=$1
    shift
    ORDER+=("$name")
    START[$name]=$SECONDS
    ( rc=0; "$@" || rc=$?; echo $SECONDS >"$LOGS/$name.end"; exit $rc ) >"$LOGS/$name.log" 2>&1 </dev/null &
    PID[$name]=$!
}
niced() { # niced N COMMAND...: runs COMMAND (a function too) at niceness N in this subshell
    renice -n "$1" "$BASHPID" >/dev/null
    shift
    "$@"
}
finish() { # finish NAME: waits for it, prints its log; its status in RC[NAME]
    local name=$1 rc=0
    wait "${PID[$name]}" || rc=$?
    END[$name]=$(cat "$LOGS/$name.end" 2>/dev/null || echo $SECONDS)
    RC[$name]=$rc
    echo "== $name: $( ((rc)) && echo "FAILED (exit $rc)" || echo ok ), $((END[$name] - START[$name])) s (ended at $((END[$name] - T0)) s) =="
    cat "$LOGS/$name.log"
}

echo "== layer rules (make check-layers: tools/layers.txt against the #include graph) =="
make -s check-layers
mkdir -p build
rm -rf "$LOGS"
mkdir -p "$LOGS"

echo "== builds: optimized and ASan + UBSan at once (their logs follow when they end) =="
start build make -j"$JOBS" all
start build-san make -j"$JOBS" SAN=1 all
finish build
((RC[build] == 0)) || { echo "the optimized build failed"; exit 1; }

unit_isa() {
    local isas="avx2 ref"
    if ./build/cinder version 2>/dev/null | grep -q "kernels amx"; then isas="avx512 $isas"; fi
    for isa in $isas; do
        echo "-- CINDER_ISA=$isa"
        CINDER_ISA=$isa ./build/test_unit --jobs "$JOBS" --filter="!(golden_qwen|spec_models|$ISA_FREE)/*"
    done
}
arm64() {
    case "$(uname -m)" in
    x86_64) make -j"$JOBS" cross-arm64 BUILD=build ;;
    aarch64) echo "skipped on an aarch64 host (the unit tests ran the NEON family natively)" ;;
    *) echo "skipped, not set up for a $(uname -m) host" ;;
    esac
}
pytest_run() { # three workers: a test that waits on a server or a subprocess leaves its core to another
    CINDER_BIN=./build/cinder CINDER_SAN_BIN=./build-san/cinder python3 -m pytest -q -p no:cacheprovider \
        -n "${PYTEST_WORKERS:-3}" --dist loadfile --durations=25 tests/py
}

# What the optimized build alone needs runs at a lower priority: the sanitized build,
# and pytest after it, are the longest road through the run.
start unit-opt niced 10 ./build/test_unit --jobs "$JOBS"
start unit-isa niced 10 unit_isa
start arm64 niced 10 arm64
start installed niced 10 ./scripts/test_installed.sh

finish build-san
if ((RC[build-san] == 0)); then
    start pytest pytest_run
    start unit-san niced 5 env "${SAN_ENV[@]}" ./build-san/test_unit --jobs "$JOBS" --filter="$NOT_BIG"
    start alloc-fail-1 niced 5 env "${SAN_ENV[@]}" ./build-san/tests/alloc_fail --shard 0/2
    start alloc-fail-2 niced 5 env "${SAN_ENV[@]}" ./build-san/tests/alloc_fail --shard 1/2
    start api env "${SAN_ENV[@]}" ./build-san/tests/api_test "${CINDER_TESTDATA:-../shared/testdata}/models" \
        tests/golden/stories260k.json
fi

for name in unit-opt unit-san alloc-fail-1 alloc-fail-2 api unit-isa arm64 installed pytest; do
    [ -n "${PID[$name]:-}" ] && finish "$name"
done

echo "== phases (wall seconds from the start of the run; they overlap) =="
failed=()
for name in "${ORDER[@]}"; do
    printf '  %-14s %5d -> %5d s  %5d s  %s\n' "$name" $((START[$name] - T0)) $((END[$name] - T0)) \
        $((END[$name] - START[$name])) "$( ((RC[$name])) && echo FAILED || echo ok )"
    ((RC[$name] == 0)) || failed+=("$name")
done
if ((${#failed[@]})); then
    echo "== FAILED: ${failed[*]} (logs: $LOGS/) in $((SECONDS - T0)) s =="
    exit 1
fi
echo "== done in $((SECONDS - T0)) s =="
