#!/usr/bin/env bash
# The library as its users get it (issue 18), run by scripts/test.sh:
#   1. `make install` into build/prefix; libcinder.so must export only the cn_ API and
#      need no HTTP library (the server is the CLI's own archive, not the library's)
#   2. examples/*.c (generate, engine, decode) and tests/api/api_test.c (they include only <cinder.h>, <cinder_gguf.h>) built against
#      the *installed* library through pkg-config, and run on stories260K
#   3. a fresh virtualenv: `pip install ./python` (which builds or finds libcinder.so),
#      the README's Python example (it must print the worked example), then the package's
#      pytest suite against the installed package
set -euo pipefail
cd "$(dirname "$0")/.."
TD=${CINDER_TESTDATA:-../shared/testdata}
P=$PWD/build/prefix
rm -rf "$P"
make -s install PREFIX="$P" >/dev/null
export PKG_CONFIG_PATH=$P/lib/pkgconfig

others=$(nm -D --defined-only "$P/lib/libcinder.so" | awk '{print $3}' | grep -v '^cn_' || true)
if [ -n "$others" ]; then echo "libcinder.so exports symbols outside the cn_ API:"; echo "$others"; exit 1; fi
needed=$(objdump -p "$P/lib/libcinder.so" | awk '/NEEDED/ {print $2}')
if grep -q microhttpd <<< "$needed"; then echo "libcinder.so needs libmicrohttpd:"; echo "$needed"; exit 1; fi
if nm -D --undefined-only "$P/lib/libcinder.so" | grep -q 'MHD_'; then echo "libcinder.so calls libmicrohttpd"; exit 1; fi
echo "libcinder.so needs: $(tr '\n' ' ' <<< "$needed")"
echo "libcinder.so: $(nm -D --defined-only "$P/lib/libcinder.so" | wc -l) symbols, all cn_; soname" \
     "$(objdump -p "$P/lib/libcinder.so" | awk '/SONAME/ {print $2}')"

CFLAGS_EX="-std=c11 -Wall -Wextra -Werror $(pkg-config --cflags cinder)"
LIBS_EX="$(pkg-config --libs cinder) -lm -Wl,-rpath,$P/lib"
mkdir -p build/examples
for x in generate engine decode; do
    # shellcheck disable=SC2086
    cc $CFLAGS_EX "examples/$x.c" $LIBS_EX -o "build/examples/$x"
done
# shellcheck disable=SC2086
cc $CFLAGS_EX tests/api/api_test.c $LIBS_EX -o build/examples/api_test

out=$(build/examples/generate "$TD/models/stories260K.gguf" "Once upon a time" 16 2>/dev/null)
grep -q "there was a little girl named Lily" <<< "$out" || { echo "examples/generate printed: $out"; exit 1; }
echo "examples/generate: $out"
# the low tier by hand (batch + decode + logits rows) must give the context's greedy text
dec=$(build/examples/decode "$TD/models/stories260K.gguf" "Once upon a time" 16 2>/dev/null)
[ "$(tr -d '\n' <<< "$dec")" = "$(tr -d '\n' <<< "$out")" ] || { echo "examples/decode printed: $dec (generate: $out)"; exit 1; }
echo "examples/decode: $dec"
out=$(build/examples/engine "$TD/models/stories260K.gguf")
[ "$(grep -c '^\[[0-2]\] .*(length)$' <<< "$out")" = 3 ] || { echo "examples/engine printed: $out"; exit 1; }
echo "examples/engine: $(tail -1 <<< "$out")"
build/examples/api_test "$TD/models" tests/golden/stories260k.json

V=$PWD/build/venv
rm -rf "$V"
python3 -m venv "$V"
rm -rf python/build python/*.egg-info  # setuptools builds in the tree: start clean
"$V/bin/pip" install -q --disable-pip-version-check ./python pytest
python3 - README.md > build/readme_example.py <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"^## Python\b.*?^```python\n(.*?)^```", text, re.S | re.M)
sys.exit("README.md has no Python example under '## Python'") if not m else print(m.group(1))
PY
out=$(cd /tmp && "$V/bin/python" "$OLDPWD/build/readme_example.py")
echo "$out"
grep -q "^Greedy: blue$" <<< "$out" && grep -qF "Top-p: [('blue', 0.667), ('gray', 0.333)]" <<< "$out" || {
    echo "the README's Python example did not print the worked example"; exit 1; }
(cd /tmp && "$V/bin/python" -m pytest -q -p no:cacheprovider "$OLDPWD/python/tests")
