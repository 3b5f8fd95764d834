#!/usr/bin/env bash
# Runs the viewer's tests: the model (pure Go, no display) and the real
# Ebitengine window (cmd/broadside-viewer), which needs cgo, the X11/GL
# headers (scripts/deps.sh installs them) and a display: if DISPLAY is
# unset, an Xvfb server is started for the run and stopped after it.
#
#   scripts/viewer-test.sh           screenshots go to ${TMPDIR:-/tmp}/broadside-viewer-shots
#   scripts/viewer-test.sh --docs    to docs/ instead (viewer-match.png, viewer-why.png)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

shots=""
if [ "${1:-}" = "--docs" ]; then
  shots=$PWD/docs
fi

xvfb_pid=""
cleanup() {
  if [ -n "$xvfb_pid" ]; then
    kill "$xvfb_pid" 2>/dev/null || true
    wait "$xvfb_pid" 2>/dev/null || true
  fi
  [ -n "${tmp:-}" ] && rm -rf "$tmp"
}
trap cleanup EXIT
tmp=$(mktemp -d)

if [ -z "${DISPLAY:-}" ]; then
  command -v Xvfb >/dev/null || { echo "viewer: Xvfb missing (scripts/deps.sh installs it)"; exit 1; }
  # The first free display from :99 up.
  d=99
  while [ -e "/tmp/.X11-unix/X$d" ] || [ -e "/tmp/.X$d-lock" ]; do d=$((d + 1)); done
  Xvfb ":$d" -screen 0 1600x1000x24 -nolisten tcp >"$tmp/xvfb.log" 2>&1 &
  xvfb_pid=$!
  for _ in $(seq 50); do
    [ -e "/tmp/.X11-unix/X$d" ] && break
    kill -0 "$xvfb_pid" 2>/dev/null || { cat "$tmp/xvfb.log"; echo "viewer: Xvfb :$d failed"; exit 1; }
    sleep 0.1
  done
  export DISPLAY=":$d"
  echo "viewer: started Xvfb on $DISPLAY"
fi

export CGO_ENABLED=1
$GO vet ./demo/viewer/... ./cmd/broadside-viewer/
$GO vet -tags window ./cmd/broadside-viewer/
$GO test -count=1 ./demo/viewer/...
# The window test: a test binary whose TestMain runs ebiten.RunGame.
$GO test -c -tags window -o "$tmp/viewer.test" ./cmd/broadside-viewer
if [ -z "$shots" ]; then
  shots=${TMPDIR:-/tmp}/broadside-viewer-shots
  mkdir -p "$shots"
fi
export BROADSIDE_VIEWER_SHOTS=$shots
# Ebitengine's X11 client warns about a missing ~/.Xauthority; Xvfb needs none.
(cd cmd/broadside-viewer && "$tmp/viewer.test" -test.count=1 -test.v -test.timeout=5m) 2>&1 \
  | grep -v '^XGB: ' \
  | tee "$tmp/viewer.log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|screenshot|:[0-9]+: ' || true
grep -q '^PASS$' "$tmp/viewer.log" || { echo "viewer: window tests failed"; tail -40 "$tmp/viewer.log"; exit 1; }
grep -q -- '--- SKIP' "$tmp/viewer.log" && { echo "viewer: window tests skipped"; exit 1; }
# The issue's end-to-end check: the viewer opens what 'broadside demo' records.
CGO_ENABLED=0 $GO run ./cmd/broadside demo --duration 5s --bots 8 --no-faults --dir "$tmp/demo" \
  --recording "$tmp/demo.bsr" >"$tmp/demo.log" 2>&1 || { cat "$tmp/demo.log"; echo "viewer: demo failed"; exit 1; }
$GO build -o "$tmp/broadside-viewer" ./cmd/broadside-viewer
"$tmp/broadside-viewer" --screenshot "$shots/viewer-demo.png" --tick 100 "$tmp/demo.bsr" 2>&1 | grep -v '^XGB: ' || true
[ -s "$shots/viewer-demo.png" ] || { echo "viewer: could not open the demo's recording"; exit 1; }
echo "viewer: opened the recording of 'broadside demo' ($shots/viewer-demo.png)"
echo "viewer: ok (model and window tests; screenshots in $BROADSIDE_VIEWER_SHOTS)"
