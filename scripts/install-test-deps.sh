#!/usr/bin/env bash
# System packages the tests need beyond Python: debootstrap, so the Docker tests can build their base
# image from Debian packages on hosts that reach no container registry (docs/containers.md).  Idempotent.
set -euo pipefail
if command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap; }
elif command -v sudo >/dev/null 2>&1; then
  sudo -n env DEBIAN_FRONTEND=noninteractive sh -c 'apt-get install -y -qq debootstrap || (apt-get update -qq && apt-get install -y -qq debootstrap)'
else
  echo "install-test-deps: debootstrap is missing and this user cannot install it; the Docker tests will fail" >&2
fi
