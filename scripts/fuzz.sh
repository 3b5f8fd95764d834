#!/usr/bin/env bash
# Runs every fuzz target in the module for the given time each (default 30s).
set -euo pipefail
t=${1:-30s}
grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
  pkg=./$(dirname "${f#./}")
  grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //' | while read -r name; do
    echo "fuzz: $pkg $name for $t"
    go test -run '^$' -fuzz "^${name}\$" -fuzztime "$t" "$pkg"
  done
done
