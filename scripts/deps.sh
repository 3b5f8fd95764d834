#!/usr/bin/env bash
# Installs the system packages Broadside's tests need, if missing (Debian).
set -euo pipefail
need=()
command -v flatc >/dev/null 2>&1 || need+=(flatbuffers-compiler)
# The viewer (cmd/broadside-viewer, Ebitengine) needs cgo, the X11/GL/ALSA
# headers, and Xvfb for its headless window test (scripts/viewer-test.sh);
# the browser tests (make browser) drive Debian's chromium headless.
for pkg in gcc libc6-dev pkg-config libasound2-dev libgl1-mesa-dev libxcursor-dev libxi-dev \
  libxinerama-dev libxrandr-dev libxxf86vm-dev xvfb chromium; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if ((${#need[@]})); then
  echo "deps: installing ${need[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
go mod download
