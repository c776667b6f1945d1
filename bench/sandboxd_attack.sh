#!/usr/bin/env bash
# sandboxd under the floods of issue 16, at the issue's sizes: the server's peak RSS under each
# flood against its own RSS after start-up (the reference, same run), and the success rate of
# a well-behaved canary client sending /exec beside the flood. Loopback only.
#   bench/sandboxd_attack.sh [seconds per flood = 8]
# The floods: 150 connections each sending an 11 MB body without a bearer; 10,000 idle
# connections from five loopback addresses, re-opened as the server closes them, against the
# default 4,096 slots. The canary comes from 127.0.0.2.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${SB_BUILD_DIR:-build}"
secs="${1:-8}"
ms=$((secs * 1000))
root="$(mktemp -d)"
log="$root.log"
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$root" "$log"' EXIT
SANDBOX_TOKEN=bench "$build/switchboard" sandboxd --listen 127.0.0.1:0 --root "$root" 2>"$log" &
pid=$!
for _ in $(seq 100); do grep -q 'sandboxd.listening' "$log" && break; sleep 0.1; done
port=$(grep -o 'port=[0-9]*' "$log" | head -1 | cut -d= -f2)
kib() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$pid/status"; }

canary() { # tries for $1 seconds; prints ok/tries
  local ok=0 n=0 end=$((SECONDS + $1))
  while [ $SECONDS -lt $end ]; do
    n=$((n + 1))
    curl -s -m 5 --interface 127.0.0.2 -H 'authorization: Bearer bench' -H 'x-thread-key: canary' \
      -d '{"command":"echo ok"}' "http://127.0.0.1:$port/exec" | grep -q '"stdout":"ok' && ok=$((ok + 1))
    sleep 0.2
  done
  echo "$ok/$n"
}

base=$(kib VmRSS)
"$build/tests/http_flood" --duration "$ms" 127.0.0.1 "$port" body 150 11000000 \
  'POST /exec HTTP/1.1\r\nHost: t\r\nContent-Length: %L\r\n\r\n' >/dev/null &
sleep 0.5
body_canary=$(canary $((secs - 1)))
wait $!
body_peak=$(kib VmHWM)

floods=()
for k in 3 4 5 6 7; do
  "$build/tests/http_flood" --duration "$ms" --from "127.0.0.$k" 127.0.0.1 "$port" idle 2000 >/dev/null &
  floods+=($!)
done
sleep 0.5
idle_canary=$(canary $((secs - 1)))
wait "${floods[@]}"
idle_peak=$(kib VmHWM)

printf '| flood | peak RSS | ratio to idle RSS (%d KiB) | canary ok/tries |\n| --- | --- | --- | --- |\n' "$base"
awk -v b="$base" -v p="$body_peak" -v c="$body_canary" 'BEGIN { printf "| 150 x 11 MB bodies, no bearer | %d KiB | %.2f | %s |\n", p, p / b, c }'
awk -v b="$base" -v p="$idle_peak" -v c="$idle_canary" 'BEGIN { printf "| 10,000 idle sockets re-opened, 5 peers | %d KiB | %.2f | %s |\n", p, p / b, c }'
