#!/usr/bin/env bash
# Side-by-side benchmark: Redis + Lua with appendfsync always against a durable
# limitd cluster, same workload generator, same report (issue 5).
#
#   scripts/bench.sh                 # the README's run: 15 s per workload
#   DURATION=5s WARMUP=1s scripts/bench.sh   # a quick look
#
# It installs redis-server with apt-get if it is missing, starts Redis on a
# free 127.0.0.1 port with --appendonly yes --appendfsync always in a temporary
# directory, and runs (C = 64, 100,000 keys, sliding_window 100 per 1 s):
#   redis    uniform, zipf                      (scripts/redisbench, EVALSHA per check)
#   limitd   3 nodes uniform, zipf, batches of 100 uniform; 1 node uniform
#            (limitd bench --cluster N: fresh loopback nodes in temp dirs)
# then prints one table with limitd's checks/s relative to Redis's and CPU per
# check of every process (Redis, each limitd node by role: leader/follower, and
# the load generator; user + system CPU from /proc/PID/stat over the measured
# interval divided by the checks answered). Everything
# it starts is stopped on exit, Ctrl-C included; each run is capped at
# RUN_TIMEOUT seconds.
#
# Environment: DURATION (15s) WARMUP (2s) CONCURRENCY (64) KEYS (100000)
# LIMIT (100) WINDOW (1s) BATCH (100) RUN_TIMEOUT (600) SERVE_FLAGS (extra
# `limitd serve` flags for tuning, e.g. "--batch-max-wait=200us")
# RESULTS (also copy the JSON lines to this file).
set -euo pipefail

DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-2s}
CONCURRENCY=${CONCURRENCY:-64}
KEYS=${KEYS:-100000}
LIMIT=${LIMIT:-100}
WINDOW=${WINDOW:-1s}
BATCH=${BATCH:-100}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
SERVE_FLAGS=${SERVE_FLAGS:-}
RESULTS=${RESULTS:-}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/limitd-bench.XXXXXX")
results=$work/results.jsonl
redis_pid=""
failed=0

log() { printf '==> %s\n' "$*" >&2; }

stop_redis() {
	if [[ -n $redis_pid ]] && kill -0 "$redis_pid" 2>/dev/null; then
		kill -TERM "$redis_pid" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 "$redis_pid" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
	fi
	redis_pid=""
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	stop_redis
	# limitd bench stops its nodes itself; if it was killed, its nodes (run
	# from $work with data under $work) are found by that unique path.
	local pids
	pids=$(pgrep -f -- "$work/" || true)
	if [[ -n $pids ]]; then
		kill -TERM $pids 2>/dev/null || true
		sleep 2
		kill -KILL $pids 2>/dev/null || true
	fi
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- Redis -------------------------------------------------------------------
if ! command -v redis-server >/dev/null 2>&1; then
	log "installing redis-server"
	sudo=""
	if [[ $(id -u) -ne 0 ]]; then sudo=sudo; fi
	export DEBIAN_FRONTEND=noninteractive
	if ! $sudo apt-get install -y -qq redis-server >/dev/null 2>&1; then
		$sudo apt-get update -qq
		$sudo apt-get install -y -qq redis-server >/dev/null
	fi
fi

# A port nothing listens on: a connect to it must fail.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_redis() {
	mkdir -p "$work/redis"
	for _ in $(seq 20); do
		local port=$((20000 + RANDOM % 40000))
		port_free "$port" || continue
		redis-server --bind 127.0.0.1 --port "$port" --protected-mode yes \
			--appendonly yes --appendfsync always --save '' \
			--dir "$work/redis" --daemonize no --logfile "$work/redis.log" &
		redis_pid=$!
		# Started if it is still running once it listens.
		for _ in $(seq 50); do
			if ! kill -0 "$redis_pid" 2>/dev/null; then break; fi
			if ! port_free "$port"; then
				redis_port=$port
				return 0
			fi
			sleep 0.1
		done
		stop_redis
	done
	log "could not start redis-server; its log:"
	cat "$work/redis.log" >&2 || true
	return 1
}

# --- Build -------------------------------------------------------------------
log "building limitd and redisbench"
(cd "$root" && go build -o "$work/limitd" ./cmd/limitd && go build -o "$work/redisbench" ./scripts/redisbench)

common=(--concurrency "$CONCURRENCY" --keys "$KEYS" --limit "$LIMIT" --window "$WINDOW"
	--duration "$DURATION" --warmup "$WARMUP" --json)
serve=()
if [[ -n $SERVE_FLAGS ]]; then serve=(--serve-flags "$SERVE_FLAGS"); fi

# run LABEL COMMAND...: one workload, one JSON line into $results.
run() {
	local label=$1
	shift
	log "$(basename "$1") $label"
	if ! TMPDIR=$work timeout --foreground -k 15 "$RUN_TIMEOUT" "$@" "${common[@]}" --label "$label" >>"$results"; then
		log "FAILED: $label"
		failed=1
	fi
}

# --- Runs --------------------------------------------------------------------
start_redis
log "redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$redis_port, appendonly yes, appendfsync always"
run "uniform" "$work/redisbench" --addr "127.0.0.1:$redis_port" --server-pid "$redis_pid" --dist uniform
run "zipf" "$work/redisbench" --addr "127.0.0.1:$redis_port" --server-pid "$redis_pid" --dist zipf
stop_redis # nothing else on the CPU while limitd runs

run "uniform" "$work/limitd" bench --cluster 3 "${serve[@]}" --algorithm sliding_window --dist uniform
run "zipf" "$work/limitd" bench --cluster 3 "${serve[@]}" --algorithm sliding_window --dist zipf
run "batch $BATCH" "$work/limitd" bench --cluster 3 "${serve[@]}" --algorithm sliding_window --dist uniform --batch "$BATCH"
run "1 node" "$work/limitd" bench --cluster 1 "${serve[@]}" --algorithm sliding_window --dist uniform

# --- Report ------------------------------------------------------------------
echo
echo "machine:  $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)"
echo "software: $(go version | cut -d' ' -f3), redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), limitd $(cd "$root" && git describe --always --dirty 2>/dev/null || echo unknown)"
echo "workload: concurrency $CONCURRENCY, $KEYS keys, sliding_window $LIMIT per $WINDOW, $DURATION after $WARMUP warm-up${SERVE_FLAGS:+, serve flags: $SERVE_FLAGS}"
echo "command:  DURATION=$DURATION WARMUP=$WARMUP CONCURRENCY=$CONCURRENCY KEYS=$KEYS scripts/bench.sh"
echo
"$work/redisbench" table "$results" || failed=1
echo
echo "targets:  3-node single checks (uniform) >= 0.50x redis with p99 < 25ms; batches of $BATCH >= 3x; 1 node >= 0.80x"
if [[ -n $RESULTS ]]; then
	cp "$results" "$RESULTS"
	log "JSON lines copied to $RESULTS"
fi
exit "$failed"
