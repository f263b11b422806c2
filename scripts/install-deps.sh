#!/usr/bin/env bash
# install-deps.sh - install the Debian packages rlrun needs to build and run (idempotent).
#   scripts/install-deps.sh            build and runtime packages
#   scripts/install-deps.sh --test     also what the test suite needs (Python references, curl,
#                                      prometheus for the real-scrape test, slurm-wlm + munge for
#                                      the real-Slurm launcher test, chromium for the report's
#                                      browser test)
# Runs `apt-get update` at most once, and only when something is missing.
set -euo pipefail

pkgs=(build-essential cmake pkg-config ninja-build python3 ca-certificates
      libzmq3-dev cppzmq-dev libyaml-cpp-dev prometheus-cpp-dev libcivetweb-dev
      libdnnl-dev libgloo-dev libpcre2-dev libutf8proc-dev nlohmann-json3-dev libcurl4-openssl-dev
      libxxhash-dev libgtest-dev libgmock-dev)
if [ "${1:-}" = "--test" ]; then
  pkgs+=(curl prometheus python3-venv python3-pip python3-torch slurm-wlm munge chromium)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
# Packages with a system service (prometheus, slurmctld, slurmd, munge) must not start it: the
# tests start their own instances (Debian's slurm postinst would even fail without a slurm.conf). A temporary policy-rc.d denies service starts during the install.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT  # also when the install fails
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
