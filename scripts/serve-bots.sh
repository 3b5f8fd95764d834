#!/usr/bin/env bash
# serve-bots.sh N DURATION [BROADSIDE]: run `broadside serve --dev` and `broadside bots --n N
# --rate 30 --duration DURATION` as separate processes on this machine and print each one's CPU
# (from /proc) and the UDP datagrams per second (from /proc/net/snmp) over the bots' run, then
# the bots' report. Uses a fresh broadside-dev directory under a temporary directory.
# SERVE_ARGS (e.g. "--ack-hold 33ms") are passed to serve; BOTS_BIN, if set, runs the bots
# (to compare two servers against the same harness).
set -euo pipefail
N=${1:?usage: serve-bots.sh N DURATION [BROADSIDE]}
D=${2:?usage: serve-bots.sh N DURATION [BROADSIDE]}
BS=${3:-broadside}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
# shellcheck disable=SC2086 # SERVE_ARGS is a list of arguments
"$BS" serve --dev ${SERVE_ARGS:-} >serve.log 2>&1 &
sp=$!
for _ in $(seq 100); do curl -sf localhost:9090/readyz >/dev/null && break; sleep 0.2; done
cpu() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null; }
udp() { awk '/^Udp:/{n++; if (n==2) print $2, $5}' /proc/net/snmp; }
tick() { curl -sf localhost:9090/metrics | awk '/^broadside_world_tick /{printf "%d", $2}'; }
s0=$(cpu $sp); read -r i0 o0 < <(udp); t0=$(date +%s%N); k0=$(tick)
"${BOTS_BIN:-$BS}" bots --n "$N" --rate 30 --duration "$D" >bots.log 2>&1 &
bp=$!
b=0
while kill -0 $bp 2>/dev/null; do b=$(cpu $bp || echo "$b"); sleep 0.5; done
t1=$(date +%s%N); s1=$(cpu $sp); read -r i1 o1 < <(udp); k1=$(tick)
kill -INT $sp; wait $sp || true
awk -v el=$(( (t1-t0)/1000000 )) -v s=$((s1-s0)) -v b="$b" -v i=$((i1-i0)) -v o=$((o1-o0)) -v n="$N" -v k=$((k1-k0)) 'BEGIN {
  el /= 1000; hz = 100
  printf "wall %.1fs: serve %.2f cores, bots %.2f cores (their whole life)\n", el, s/hz/el, b/hz/el
  printf "UDP datagrams/s: %d sent, %d received; %.1f sent per bot per second\n", o/el, i/el, o/el/n
  printf "world: %.1f ticks/s; serve CPU per player-tick %.1f us (serve CPU / (bots x ticks))\n", k/el, s/hz*1e6/(n*k) }'
cat bots.log
