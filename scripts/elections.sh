#!/usr/bin/env bash
# False elections on a busy host (issue 21): three limitd nodes on loopback,
# one check every 200 ms through a follower (a leader with almost no
# traffic), HOGS busy-loop processes for SECONDS; prints the load average and
# the elections (term changes) seen meanwhile.
#
#   scripts/elections.sh 1s 1s 500ms 16 45        # the defaults
#   LIMITD=./limitd scripts/elections.sh 500ms 500ms 250ms 16 45
#
# Arguments: heartbeat, election and lease timeouts, HOGS, SECONDS.
# Needs curl. Uses ports 20000-40000 on 127.0.0.1; everything it starts is
# stopped at the end.
set -u
HB=$1 EL=$2 LEASE=$3 HOGS=$4 SECS=$5
BIN=${LIMITD:-limitd}
D=$(mktemp -d "${TMPDIR:-/tmp}/limitd-elections.XXXXXX")
pids=() hogs=()
cleanup() {
	for p in "${hogs[@]}" "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
base=$((20000 + RANDOM % 20000))
flags=(--raft-heartbeat-timeout="$HB" --raft-election-timeout="$EL" --raft-lease-timeout="$LEASE")
"$BIN" serve --node-id n1 --http-addr 127.0.0.1:$base --raft-addr 127.0.0.1:$((base + 1)) --data-dir "$D/n1" "${flags[@]}" >"$D/n1.log" 2>&1 &
pids+=($!)
sleep 1
for i in 2 3; do
	"$BIN" serve --node-id n$i --http-addr 127.0.0.1:$((base + 10 * i)) --raft-addr 127.0.0.1:$((base + 10 * i + 1)) \
		--data-dir "$D/n$i" --join http://127.0.0.1:$base "${flags[@]}" >"$D/n$i.log" 2>&1 &
	pids+=($!)
done
ready=0
for _ in $(seq 1 150); do
	ready=0
	for p in $base $((base + 20)) $((base + 30)); do curl -sf http://127.0.0.1:$p/readyz >/dev/null && ready=$((ready + 1)); done
	[[ $ready == 3 ]] && break
	sleep 0.2
done
if [[ $ready != 3 ]]; then
	echo "the cluster did not become ready; logs:" >&2
	tail -5 "$D"/n*.log >&2
	exit 1
fi
term() { curl -s http://127.0.0.1:$base/v1/cluster | grep -o '"term":[0-9]*' | cut -d: -f2; }
term0=$(term)
for _ in $(seq 1 "$HOGS"); do
	(while :; do :; done) &
	hogs+=($!)
done
end=$((SECONDS + SECS)) n=0 failed=0
while ((SECONDS < end)); do
	curl -sf -m 5 -X POST http://127.0.0.1:$((base + 20))/v1/check \
		-d '{"key":"k","limit":{"algorithm":"fixed_window","limit":1000000,"window":"1h"}}' >/dev/null || failed=$((failed + 1))
	n=$((n + 1))
	sleep 0.2
done
load=$(cut -d' ' -f1 /proc/loadavg)
for h in "${hogs[@]}"; do kill "$h"; done
hogs=()
term1=$(term)
echo "timers $HB/$EL/$LEASE hogs=$HOGS seconds=$SECS load1=$load elections=$((term1 - term0)) checks=$n failed=$failed"
