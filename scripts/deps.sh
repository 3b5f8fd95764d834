#!/usr/bin/env bash
# Installs the system packages Broadside's tests need, if missing (Debian).
set -euo pipefail
need=()
command -v flatc >/dev/null 2>&1 || need+=(flatbuffers-compiler)
if ((${#need[@]})); then
  echo "deps: installing ${need[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
go mod download
