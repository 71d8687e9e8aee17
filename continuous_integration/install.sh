#!/usr/bin/env bash
# Install the package in editable mode with its test dependencies, and the
# headless browser the dashboard's browser tests use (Debian's chromium).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Eager: an environment that already holds older releases (pytest, IPython, ...) is
# brought to the newest, so that CI checks what a new install of the package gets.
# uv resolves and installs the same newest releases in seconds where pip takes a
# minute; where uv cannot be had or fails, pip does it.
if python -m pip install -q --upgrade uv && python -m uv pip install --python "$(command -v python)" --upgrade -e ".[test]"; then
    echo "Installed with uv"
else
    echo "uv unavailable or failed: installing with pip"
    python -m pip install --upgrade --upgrade-strategy eager -e ".[test]"
fi

# The dashboard tests open /status in headless Chromium. Install it with apt when
# it is missing and we may (root, apt-get present); otherwise those tests skip
# locally, and fail in CI (where CI is set) so that they cannot silently stop running.
if ! command -v chromium >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "Installing chromium (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
    fi
fi

# The multi-host tests build hosts as network namespaces (ip, tc: iproute2). They skip
# locally without it, and fail in CI (CI=true) so that they cannot silently stop running.
if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "Installing iproute2 (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null
    fi
fi

# The SSHCluster and `dask ssh` tests run OpenSSH servers on the test hosts (sshd, ssh-keygen).
# They skip locally without it, and fail in CI (CI=true) so that they cannot silently stop running.
if [[ ! -x /usr/sbin/sshd ]] || ! command -v ssh-keygen >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "Installing openssh-server (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
    fi
fi
