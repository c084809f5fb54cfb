#!/usr/bin/env bash
# Installs everything cinder needs, idempotently: Debian packages (compiler, PCRE2,
# jansson, libmicrohttpd, Criterion; chromium and its driver for the chat page's browser
# tests), the Python packages the tests use (selenium 4.50: 4.51+ need a certifi newer
# than PyPI serves here; pytest-xdist runs the python checks on three workers), and the real
# models (scripts/fetch_models.sh). Safe to run again: each step checks first.
#
#   scripts/setup.sh          packages + default model
#   scripts/setup.sh --all    packages + every model the tests use (CI)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PKGS=(build-essential pkg-config libpcre2-dev libjansson-dev libmicrohttpd-dev
          libcriterion-dev python3 python3-pip python3-venv)
# the chat page's browser tests and the replica test behind nginx (make test runs
# setup.sh --all): only for the test setup
if [ "${1:-}" = --all ]; then
    APT_PKGS+=(chromium chromium-driver nginx-light)
fi
# make test's arm64 cross check (x86_64 hosts): cross compiler, arm64 libc, qemu-aarch64
if [ "$(uname -m)" = x86_64 ]; then
    APT_PKGS+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
fi
PIP_PKGS=(numpy==2.4.6 gguf==0.19.0 pytest==9.2.0 openai==3.51.0 anthropic==2.17.0 prometheus_client==0.26.0 jsonschema==4.26.0
          selenium==4.50.0 jinja2==3.1.6 pytest-xdist==3.8.0)

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo

missing=()
for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
fi

if ! python3 -c 'import numpy, gguf, pytest, openai, anthropic, prometheus_client, jsonschema, selenium, jinja2, xdist' 2>/dev/null; then
    echo "setup: installing Python packages: ${PIP_PKGS[*]}" >&2
    python3 -m pip install --quiet --disable-pip-version-check "${PIP_PKGS[@]}" >&2 ||
        python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "${PIP_PKGS[@]}" >&2
fi

if [ "${1:-}" = --all ]; then
    scripts/fetch_models.sh all
else
    scripts/fetch_models.sh
fi
