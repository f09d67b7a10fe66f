#!/usr/bin/env bash
# System packages the tests need beyond Python (Debian packages; idempotent):
# - debootstrap, so the Docker tests can build their base image on hosts that reach no container
#   registry (docs/containers.md);
# - chromium-headless-shell, the real browser tests/ui/test_browser.py drives (docs/ui.md).
set -euo pipefail
need=()
if ! command -v debootstrap >/dev/null 2>&1 && [ ! -x /usr/sbin/debootstrap ]; then need+=(debootstrap); fi
if ! command -v chromium-headless-shell >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1; then
  need+=(chromium-headless-shell)
fi
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "install-test-deps: installing ${need[*]} (apt)"
if [ "$(id -u)" -eq 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "${need[@]}"; }
elif command -v sudo >/dev/null 2>&1; then
  sudo -n env DEBIAN_FRONTEND=noninteractive sh -c "apt-get install -y -qq ${need[*]} || (apt-get update -qq && apt-get install -y -qq ${need[*]})"
else
  echo "install-test-deps: ${need[*]} missing and this user cannot install them; the Docker and browser tests will fail" >&2
fi
