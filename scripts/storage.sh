#!/usr/bin/env bash
# Storage and data-size scaling of a single limitd node (issue 5):
#   1. bytes on disk per active key, per algorithm, after filling KEYS keys
#      (batches of 100 checks, every key in turn, window 1h so none expires),
#      and the process RSS;
#   2. throughput with 10,000 vs 1,000,000 distinct keys (single checks, C=64);
#   3. sliding_log at limit 10 vs 10,000 under the same traffic (100 hot keys).
# Everything runs on 127.0.0.1 and stops by itself.
#
#   scripts/storage.sh                  # KEYS=1000000 FILL=40s RUN=10s
#   KEYS=100000 FILL=10s RUN=5s scripts/storage.sh   # a quick look
#   SERVE_FLAGS="--fsm-cache-keys 2000000" ALGS=sliding_window scripts/storage.sh
#                                       # extra serve flags; a subset of algorithms
set -euo pipefail

KEYS=${KEYS:-1000000}
FILL=${FILL:-40s}
RUN=${RUN:-10s}
ALGS=${ALGS:-fixed_window sliding_window token_bucket leaky_bucket sliding_log}
SERVE_FLAGS=${SERVE_FLAGS:-}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/limitd-storage.XXXXXX")
pid=""
cleanup() {
	[[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

go build -o "$work/limitd" "$root/cmd/limitd"
bin=$work/limitd
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start() {
	rm -rf "$work/data"
	http=127.0.0.1:$(freeport)
	raft=127.0.0.1:$(freeport)
	# shellcheck disable=SC2086 # SERVE_FLAGS is a list of flags
	# No key bounds: the run measures what KEYS inline-limit keys cost, and
	# the default --max-keys (and its inline share) would refuse most of them.
	"$bin" serve --http-addr "$http" --raft-addr "$raft" --data-dir "$work/data" --max-keys 0 $SERVE_FLAGS >"$work/node.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		curl -sf "http://$http/readyz" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "node did not become ready:" >&2
	cat "$work/node.log" >&2
	exit 1
}
stop() { kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }
metric() { curl -s "http://$http/metrics" | awk -v m="$1" '$1 == m { printf "%d", $2 }'; }
bench() { "$bin" bench --addrs "http://$http" --json --warmup 1s "$@" | tail -n 1; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

echo "== bytes on disk per active key after filling $KEYS keys (batches of 100, window 1h)"
printf '%-15s %10s %14s %12s %14s %10s\n' algorithm keys live_bytes bytes/key fsm.db_bytes rss_MiB
for alg in $ALGS; do
	start
	bench --algorithm "$alg" --limit 100 --window 1h --keys "$KEYS" --dist sequential --batch 100 --duration "$FILL" >/dev/null
	keys=$(metric limitd_keys_stored)
	live=$(metric limitd_bbolt_live_bytes)
	size=$(metric limitd_bbolt_size_bytes)
	rss=$(metric process_resident_memory_bytes)
	printf '%-15s %10d %14d %12.1f %14d %10.1f\n' "$alg" "$keys" "$live" "$(echo "$live / $keys" | bc -l)" "$size" "$(echo "$rss / 1048576" | bc -l)"
	stop
done

echo
echo "== throughput vs number of keys (single checks, C=64, sliding_window 100/1s, $RUN)"
start
small=$(bench --keys 10000 --duration "$RUN")
large=$(bench --keys 1000000 --duration "$RUN")
stop
s=$(field "$small" checks_per_sec)
l=$(field "$large" checks_per_sec)
printf '10,000 keys: %.0f checks/s   1,000,000 keys: %.0f checks/s   ratio %.2f\n' "$s" "$l" "$(echo "$l / $s" | bc -l)"

echo
echo "== sliding_log limit 10 vs 10,000, same traffic (100 keys, window 1m, C=64, $RUN)"
start
a=$(bench --algorithm sliding_log --limit 10 --window 1m --keys 100 --duration "$RUN")
stop
start
b=$(bench --algorithm sliding_log --limit 10000 --window 1m --keys 100 --duration "$RUN")
stop
a=$(field "$a" checks_per_sec)
b=$(field "$b" checks_per_sec)
printf 'limit 10: %.0f checks/s   limit 10,000: %.0f checks/s   ratio %.2f\n' "$a" "$b" "$(echo "$a / $b" | bc -l)"
