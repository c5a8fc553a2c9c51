#!/usr/bin/env bash
# Side-by-side benchmark: Redis + Lua with appendfsync always against a durable
# limitd cluster, same workload generator, same report (issues 5, 12, 13, 14, 16).
#
#   scripts/bench.sh                          # every row, 15 s each: about 7 minutes
#   DURATION=5s WARMUP=1s scripts/bench.sh    # a quick look: about 2 minutes
#   ROWS="redis http grpc client" scripts/bench.sh   # a subset
#
# It installs redis-server with apt-get if it is missing, starts Redis on a
# free 127.0.0.1 port with --appendonly yes --appendfsync always in a temporary
# directory, and runs these rows (C = 64, 100,000 keys, sliding_window 100 per
# 1 s; limitd rows start fresh loopback nodes with `limitd bench --cluster N`):
#   redis         uniform single checks     (scripts/redisbench, EVALSHA per check)
#   redis-zipf    zipf single checks
#   redis-attack  the attack workload (below)
#   bare          scripts/barehttp: decode the check JSON, encode a decision, no
#                 Raft, no disk: the ceiling of single checks over HTTP/1.1 JSON
#   bare3         three barehttp processes, requests round robin, each with
#                 GOMAXPROCS of a third of the CPUs: the same ceiling for three
#                 servers sharing this machine, as the 3-node limitd rows do
#   http          limitd 3 nodes, HTTP/JSON single checks, round robin
#   leader        limitd 3 nodes, HTTP/JSON single checks, all to the leader
#                 (--leader-only: what a follower costs without serving HTTP)
#   zipf          limitd 3 nodes, zipf
#   batch         limitd 3 nodes, batches of $BATCH
#   1node         limitd 1 node, HTTP/JSON single checks
#   grpc          limitd 3 nodes, limitd.v1 Check over gRPC, round robin
#   rls           limitd 3 nodes, Envoy RLS ShouldRateLimit, one descriptor
#   client        limitd 3 nodes, limitd's Go client: 64 goroutines of single
#                 client.Check calls (leader-aware, coalescing on)
#   attack        limitd 3 nodes, requests round robin over all nodes:
#                 $HOT_FRACTION of the checks on $HOT_KEYS hot keys limited to
#                 $HOT_LIMIT per window, the rest on the normal keys
#   attack-nocache  the same with the over-limit cache off
#                 (--overlimit-cache-entries=0): every refusal a Raft round
#   hot           limitd 3 nodes, every check on the hot keys: what a refusal
#                 served from the over-limit cache costs a node
#   lease         limitd 3 nodes, $LEASE_KEYS busy keys under a daily quota of
#                 10^9 (fixed window) with the lease option $LEASE: allowed
#                 checks answered from quota leases (issue 25); compare with
#                 the bare and bare3 rows, and read "Raft entries" per 1,000
#                 checks in limitd bench's report (--json: raft_entries)
# and the open-loop rows (checks scheduled at a fixed rate, each latency
# counted from its scheduled time, up to $MAX_INFLIGHT in flight; --rate), run
# after the rows above at every rate of $RATES, $ROUNDS times over, each round
# alternating the systems in this order so they share the machine's moods:
#   open-redis    Redis + Lua, appendfsync always (scripts/redisbench --rate)
#   open-envoy    envoyproxy/ratelimit on its own Redis (no persistence), over
#                 its gRPC RLS API (limitd bench --target rls --external-rls);
#                 needs the ratelimit binary in $ENVOY_RATELIMIT (build it from
#                 github.com/envoyproxy/ratelimit outside this repository),
#                 skipped with a note otherwise
#   open-bare3    three barehttp processes, round robin, one CPU's share each:
#                 the floor at that rate of three servers on this machine
#                 answering HTTP/JSON checks with no Raft, disk or forwarding
#   open-1node    limitd 1 node, HTTP/JSON
#   open-3node    limitd 3 nodes, HTTP/JSON, round robin
#   open-client   limitd 3 nodes through limitd's Go client (leader-aware,
#                 coalescing concurrent calls into batches): no forward hop
# then prints one table with each run's checks/s relative to Redis's on the
# same workload, the normal keys' p99 of attack runs, and CPU per check of
# every process (Redis, barehttp, each limitd node by role: leader/follower,
# and the load generator — for the client row that is the Go client's cost;
# user + system CPU from /proc/PID/stat over the measured interval divided by
# the checks answered), and the disk each durable system's run had: append +
# fsync p50/p99 timed before the run in its data directory (limitd's cluster
# directory, Redis's AOF directory; --fsync-probe). limitd bench --cluster gives each node an equal share
# of the machine's CPUs as GOMAXPROCS (--node-procs; 3 nodes on 2 CPUs: 1
# each), standing in for a machine per node. Everything it starts is stopped on exit, Ctrl-C
# included; each run is capped at RUN_TIMEOUT seconds.
#
# Environment: ROWS (all of the above, in that order) DURATION (15s) WARMUP
# (2s) CONCURRENCY (64) KEYS (100000) LIMIT (100) WINDOW (1s) BATCH (100)
# HOT_KEYS (10) HOT_FRACTION (0.9) HOT_LIMIT (1) RUN_TIMEOUT (600)
# LEASE ('{"share":0.05,"max_ttl":"2s"}') LEASE_KEYS (100)
# RATES ("1000 3000") ROUNDS (1) MAX_INFLIGHT (256) ARRIVAL (constant)
# ENVOY_RATELIMIT (path of envoyproxy/ratelimit's binary)
# SERVE_FLAGS (extra `limitd serve` flags for tuning, e.g.
# "--batch-max-wait=200us") RESULTS (also copy the JSON lines to this file).
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
HOT_KEYS=${HOT_KEYS:-10}
HOT_FRACTION=${HOT_FRACTION:-0.9}
HOT_LIMIT=${HOT_LIMIT:-1}
LEASE=${LEASE:-'{"share":0.05,"max_ttl":"2s"}'}
LEASE_KEYS=${LEASE_KEYS:-100}
RATES=${RATES:-1000 3000}
ROUNDS=${ROUNDS:-1}
MAX_INFLIGHT=${MAX_INFLIGHT:-256}
ARRIVAL=${ARRIVAL:-constant}
ENVOY_RATELIMIT=${ENVOY_RATELIMIT:-}
ALL_ROWS="redis redis-zipf redis-attack bare bare3 http leader zipf batch 1node grpc rls client attack attack-nocache hot lease open-redis open-envoy open-bare3 open-1node open-3node open-client"
ROWS=${ROWS:-$ALL_ROWS}
for r in $ROWS; do
	case " $ALL_ROWS " in
	*" $r "*) ;;
	*)
		echo "scripts/bench.sh: unknown row \"$r\" in ROWS (want some of: $ALL_ROWS)" >&2
		exit 2
		;;
	esac
done
want() { [[ " $ROWS " == *" $1 "* ]]; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/limitd-bench.XXXXXX")
results=$work/results.jsonl
redis_pid=""
envoy_pid=""
envoy_redis_pid=""
bare_pid="" # one or more, space-separated
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

stop_pid() {
	local p=$1
	if [[ -n $p ]] && kill -0 "$p" 2>/dev/null; then
		kill -TERM "$p" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	fi
}

stop_envoy() {
	stop_pid "$envoy_pid"
	stop_pid "$envoy_redis_pid"
	envoy_pid="" envoy_redis_pid=""
}

stop_bare() {
	local p
	for p in $bare_pid; do
		if kill -0 "$p" 2>/dev/null; then
			kill -TERM "$p" 2>/dev/null || true
			wait "$p" 2>/dev/null || true
		fi
	done
	bare_pid=""
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	stop_redis
	stop_envoy
	stop_bare
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
if [[ " $ROWS " == *" redis"* || " $ROWS " == *" open-redis "* || " $ROWS " == *" open-envoy "* ]] && ! command -v redis-server >/dev/null 2>&1; then
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
log "building limitd, redisbench and barehttp"
(cd "$root" && go build -o "$work/limitd" ./cmd/limitd && go build -o "$work/redisbench" ./scripts/redisbench &&
	go build -o "$work/barehttp" ./scripts/barehttp)

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

# The attack workload, the same for Redis and limitd.
attack=(--hot-keys "$HOT_KEYS" --hot-fraction "$HOT_FRACTION" --hot-limit "$HOT_LIMIT")

# --- Runs --------------------------------------------------------------------
if want redis || want redis-zipf || want redis-attack; then
	start_redis
	log "redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$redis_port, appendonly yes, appendfsync always"
	redis=("$work/redisbench" --addr "127.0.0.1:$redis_port" --server-pid "$redis_pid" --fsync-probe "$work/redis")
	if want redis; then run "uniform" "${redis[@]}" --dist uniform; fi
	if want redis-zipf; then run "zipf" "${redis[@]}" --dist zipf; fi
	if want redis-attack; then run "attack" "${redis[@]}" --dist uniform "${attack[@]}"; fi
	stop_redis # nothing else on the CPU while limitd runs
fi

# start_bare N: N barehttp processes on free ports, each with GOMAXPROCS of
# an equal share of the CPUs (as limitd bench --cluster gives its nodes);
# sets bare_addrs and bare_pids (comma-separated) and bare_pid.
start_bare() {
	local n=$1 procs=$(( $(nproc) / $1 )) port
	((procs >= 1)) || procs=1
	bare_addrs="" bare_pids=""
	for _ in $(seq "$n"); do
		for _ in $(seq 20); do
			port=$((20000 + RANDOM % 40000))
			port_free "$port" && break
		done
		GOMAXPROCS=$procs "$work/barehttp" "127.0.0.1:$port" 2>>"$work/barehttp.log" &
		bare_pid="$bare_pid $!"
		bare_addrs="${bare_addrs:+$bare_addrs,}http://127.0.0.1:$port"
		bare_pids="${bare_pids:+$bare_pids,}$!"
	done
}

if want bare; then
	start_bare 1
	run "bare http" "$work/limitd" bench --system barehttp --addrs "$bare_addrs" --pids "$bare_pids" \
		--algorithm sliding_window --dist uniform
	stop_bare
fi
if want bare3; then
	start_bare 3
	run "bare x3" "$work/limitd" bench --system barehttp --addrs "$bare_addrs" --pids "$bare_pids" \
		--algorithm sliding_window --dist uniform
	stop_bare
fi

lim=("$work/limitd" bench "${serve[@]}" --algorithm sliding_window)
if want http; then run "http" "${lim[@]}" --cluster 3 --dist uniform; fi
if want leader; then run "leader only" "${lim[@]}" --cluster 3 --dist uniform --leader-only; fi
if want zipf; then run "zipf" "${lim[@]}" --cluster 3 --dist zipf; fi
if want batch; then run "batch $BATCH" "${lim[@]}" --cluster 3 --dist uniform --batch "$BATCH"; fi
if want 1node; then run "1 node" "${lim[@]}" --cluster 1 --dist uniform; fi
if want grpc; then run "grpc" "${lim[@]}" --cluster 3 --dist uniform --target grpc; fi
if want rls; then run "rls" "${lim[@]}" --cluster 3 --dist uniform --target rls; fi
if want client; then run "client" "${lim[@]}" --cluster 3 --dist uniform --target client; fi
if want attack; then run "attack" "${lim[@]}" --cluster 3 --dist uniform "${attack[@]}"; fi
if want attack-nocache; then
	run "attack, no cache" "$work/limitd" bench --serve-flags "$SERVE_FLAGS --overlimit-cache-entries=0" --algorithm sliding_window \
		--cluster 3 --dist uniform "${attack[@]}"
fi
if want hot; then run "hot keys only" "${lim[@]}" --cluster 3 --dist uniform --hot-keys "$HOT_KEYS" --hot-fraction 1 --hot-limit "$HOT_LIMIT"; fi
if want lease; then
	# Its own keys, limit and window: run's common flags would override them.
	log "limitd lease"
	if ! TMPDIR=$work timeout --foreground -k 15 "$RUN_TIMEOUT" "$work/limitd" bench "${serve[@]}" --cluster 3 \
		--policy leased --lease "$LEASE" --algorithm fixed_window --limit 1000000000 --window 24h \
		--keys "$LEASE_KEYS" --dist uniform --concurrency "$CONCURRENCY" --duration "$DURATION" --warmup "$WARMUP" \
		--json --label "lease" >>"$results"; then
		log "FAILED: lease"
		failed=1
	fi
fi

# --- Open loop ---------------------------------------------------------------
# free_port: a port nothing listens on, in $REPLY.
free_port() {
	for _ in $(seq 20); do
		REPLY=$((20000 + RANDOM % 40000))
		port_free "$REPLY" && return 0
	done
	return 1
}

# start_envoy: envoyproxy/ratelimit on a Redis of its own (no persistence, as
# it is usually run), with the domain limitd bench --target rls asks for.
start_envoy() {
	local rport gport hport dport dir=$work/envoy
	mkdir -p "$dir/runtime/ratelimit/config"
	free_port && rport=$REPLY
	redis-server --bind 127.0.0.1 --port "$rport" --save '' --appendonly no --daemonize no \
		--logfile "$dir/redis.log" &
	envoy_redis_pid=$!
	# envoyproxy/ratelimit has fixed windows and no algorithm key.
	printf 'domain: limitd-bench\ndescriptors:\n  - key: bench_key\n    rate_limit:\n      unit: second\n      requests_per_unit: %s\n' \
		"$LIMIT" >"$dir/runtime/ratelimit/config/bench.yaml"
	free_port && gport=$REPLY
	free_port && hport=$REPLY
	free_port && dport=$REPLY
	REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:$rport USE_STATSD=false LOG_LEVEL=warn \
		RUNTIME_ROOT=$dir/runtime RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		HOST=127.0.0.1 PORT=$hport GRPC_HOST=127.0.0.1 GRPC_PORT=$gport DEBUG_HOST=127.0.0.1 DEBUG_PORT=$dport \
		"$ENVOY_RATELIMIT" >"$dir/ratelimit.log" 2>&1 &
	envoy_pid=$!
	for _ in $(seq 100); do
		if curl -fsS "http://127.0.0.1:$hport/healthcheck" >/dev/null 2>&1; then
			envoy_grpc=127.0.0.1:$gport
			return 0
		fi
		kill -0 "$envoy_pid" 2>/dev/null || break
		sleep 0.1
	done
	log "envoyproxy/ratelimit did not start; its log:"
	cat "$dir/ratelimit.log" >&2 || true
	stop_envoy
	return 1
}

if want open-envoy && [[ -z $ENVOY_RATELIMIT ]]; then
	log "open-envoy skipped: set ENVOY_RATELIMIT to envoyproxy/ratelimit's binary (go build ./src/service_cmd in a checkout of github.com/envoyproxy/ratelimit)"
fi
open_rows=0
for r in open-redis open-envoy open-bare3 open-1node open-3node open-client; do want "$r" && open_rows=1; done
if ((open_rows)); then
	if want open-redis; then start_redis; fi
	envoy_ok=0
	if want open-envoy && [[ -n $ENVOY_RATELIMIT ]]; then
		if start_envoy; then envoy_ok=1; else failed=1; fi
	fi
	for round in $(seq "$ROUNDS"); do
		for rate in $RATES; do
			open=(--rate "$rate" --arrival "$ARRIVAL" --max-inflight "$MAX_INFLIGHT" --dist uniform)
			if want open-redis; then
				run "open $rate/s r$round" "$work/redisbench" --addr "127.0.0.1:$redis_port" --server-pid "$redis_pid" --fsync-probe "$work/redis" "${open[@]}"
			fi
			if ((envoy_ok)); then
				run "open $rate/s r$round" "$work/limitd" bench --system envoy-ratelimit --target rls --external-rls \
					--grpc-addrs "$envoy_grpc" --pids "$envoy_pid" --algorithm fixed_window "${open[@]}"
			fi
			if want open-bare3; then
				start_bare 3
				run "open $rate/s r$round" "$work/limitd" bench --system barehttp --addrs "$bare_addrs" --pids "$bare_pids" \
					--algorithm sliding_window "${open[@]}"
				stop_bare
			fi
			if want open-1node; then run "open $rate/s r$round" "${lim[@]}" --cluster 1 "${open[@]}"; fi
			if want open-3node; then run "open $rate/s r$round" "${lim[@]}" --cluster 3 "${open[@]}"; fi
			if want open-client; then run "open $rate/s r$round" "${lim[@]}" --cluster 3 --target client "${open[@]}"; fi
		done
	done
	stop_redis
	stop_envoy
fi

# --- Report ------------------------------------------------------------------
echo
echo "machine:  $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)"
redis_version=$(redis-server --version 2>/dev/null | sed -n 's/.*v=\([^ ]*\).*/\1/p')
echo "software: $(go version | cut -d' ' -f3), redis ${redis_version:-not run}, limitd $(cd "$root" && git describe --always --dirty 2>/dev/null || echo unknown)"
echo "open loop: rates $RATES checks/s ($ARRIVAL), up to $MAX_INFLIGHT in flight, $ROUNDS round(s), latency from the scheduled time"
echo "workload: concurrency $CONCURRENCY, $KEYS keys, sliding_window $LIMIT per $WINDOW, $DURATION after $WARMUP warm-up; attack: $HOT_FRACTION of checks on $HOT_KEYS hot keys limited to $HOT_LIMIT per $WINDOW${SERVE_FLAGS:+; serve flags: $SERVE_FLAGS}"
echo "command:  ROWS=\"$ROWS\" DURATION=$DURATION WARMUP=$WARMUP CONCURRENCY=$CONCURRENCY KEYS=$KEYS RATES=\"$RATES\" ROUNDS=$ROUNDS scripts/bench.sh"
echo
if [[ -s $results ]]; then
	"$work/redisbench" table "$results" || failed=1
else
	log "no results"
	failed=1
fi
echo
echo "targets:  issue 14: 3-node single checks (uniform) >= 0.50x redis with p99 < 25ms; batches of $BATCH >= 3x; 1 node >= 0.80x"
echo "          issue 12: grpc single checks >= http single checks (same cluster size)"
echo "          issue 13: client row's loadgen CPU per check < redis row's loadgen; client checks/s >= 1.5x redis"
echo "          issue 20: open 3-node 3,000/s: p50 <= 2.5x redis's, p99 <= 3x redis's (and <= envoy's), p99.9 <= 25ms;"
echo "                    open 3-node 1,000/s and 1-node 3,000/s: p99 <= 3x redis's"
echo "          issue 16: hot row's CPU per check summed over the nodes <= 1.2x bare's (or bare3's) server CPU per check; attack >= 0.8x bare http (bare3)"
echo "                    checks/s and >= 2.5x the attack-nocache row; attack's normal p99 <= the http row's p99"
if [[ -n $RESULTS ]]; then
	cp "$results" "$RESULTS"
	log "JSON lines copied to $RESULTS"
fi
exit "$failed"
