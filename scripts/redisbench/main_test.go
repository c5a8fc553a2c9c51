package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/bench"
	"github.com/limitd/limitd/internal/testtool"
)

// startRedis runs a throwaway redis-server on a free loopback port, or skips
// the test when Redis is not installed (scripts/bench.sh installs it).
func startRedis(t *testing.T) string {
	t.Helper()
	path := testtool.Path(t, "redis-server", "apt-get install redis-server")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	cmd := exec.Command(path, "--bind", "127.0.0.1", "--port", fmt.Sprint(addr.Port),
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--daemonize", "no")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("redis log:\n%s", logs.String())
		}
	})
	return addr.String()
}

const (
	wUS   = int64(1_000_000) // 1 s window in microseconds
	limit = int64(10)
)

type scripted struct {
	t  *testing.T
	tg *target
}

func newScripted(t *testing.T) scripted {
	addr := startRedis(t)
	tg, err := newTarget(context.Background(), targetConfig{
		Addr: addr, Conns: 4, Timeout: 5 * time.Second, Wait: 10 * time.Second,
		KeyPrefix: "k:", Limit: limit, WindowUS: wUS, Cost: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return scripted{t, tg}
}

// at runs the script for key with an explicit time in microseconds.
func (s scripted) at(key string, lim, window, cost, nowUS int64) (bool, int64) {
	s.t.Helper()
	res, err := s.tg.rdb.EvalSha(context.Background(), s.tg.sha, []string{key}, lim, window, cost, nowUS).Int64Slice()
	if err != nil {
		s.t.Fatalf("EVALSHA %s at %d: %v", key, nowUS, err)
	}
	return res[0] == 1, res[1]
}

// fill admits limit requests for key at the start of window idx.
func (s scripted) fill(key string, idx int64) {
	s.t.Helper()
	for i := range limit {
		if ok, rem := s.at(key, limit, wUS, 1, idx*wUS); !ok || rem != limit-1-i {
			s.t.Fatalf("fill %s: request %d allowed %v remaining %d", key, i, ok, rem)
		}
	}
	if ok, _ := s.at(key, limit, wUS, 1, idx*wUS); ok {
		s.t.Fatalf("fill %s: request %d allowed over the limit", key, limit+1)
	}
}

// Cases worked out by hand from the formula, limit 10 per 1 s, the previous
// window full (10): a request of cost 1 at r µs into the next window is
// allowed iff (W − r)·10 + W ≤ 10·W, i.e. r ≥ W/10.
func TestScriptExactBoundary(t *testing.T) {
	s := newScripted(t)
	const base = int64(1_700_000_000) // a realistic window index
	s.fill("edge", base)
	next := (base + 1) * wUS
	if ok, rem := s.at("edge", limit, wUS, 1, next+wUS/10-1); ok || rem != 0 {
		t.Errorf("1 µs before the weighted count allows: allowed %v remaining %d", ok, rem)
	}
	// Exactly at the limit: weighted 9 + cost 1 = 10.
	if ok, rem := s.at("edge", limit, wUS, 1, next+wUS/10); !ok || rem != 0 {
		t.Errorf("at the first acceptable instant: allowed %v remaining %d, want true 0", ok, rem)
	}
	// The admitted request counts: the next one must wait for r ≥ 2W/10.
	if ok, _ := s.at("edge", limit, wUS, 1, next+2*wUS/10-1); ok {
		t.Error("admitted 1 µs early after a counted request")
	}
	if ok, _ := s.at("edge", limit, wUS, 1, next+2*wUS/10); !ok {
		t.Error("refused at r = 2W/10")
	}
}

func TestScriptPreviousWindowWeighting(t *testing.T) {
	s := newScripted(t)
	const base = int64(1_700_000_100)
	s.fill("half", base)
	// Half way into the next window the previous 10 weigh 5: five more fit.
	mid := (base+1)*wUS + wUS/2
	for i := range int64(5) {
		if ok, rem := s.at("half", limit, wUS, 1, mid); !ok || rem != 4-i {
			t.Errorf("request %d at 50%%: allowed %v remaining %d, want true %d", i, ok, rem, 4-i)
		}
	}
	if ok, rem := s.at("half", limit, wUS, 1, mid); ok || rem != 0 {
		t.Errorf("6th request at 50%%: allowed %v remaining %d", ok, rem)
	}
	// Refused requests are not counted: one window later the previous count
	// is the 5 admitted, not the 6 sent. At 60% of the window: 0.4·5 = 2
	// weighted, so 8 fit.
	later := (base+2)*wUS + 6*wUS/10
	if ok, rem := s.at("half", limit, wUS, 1, later); !ok || rem != 7 {
		t.Errorf("next window at 60%%: allowed %v remaining %d, want true 7", ok, rem)
	}

	// The previous count counts only for the window immediately before.
	s.fill("gap", base)
	if ok, rem := s.at("gap", limit, wUS, 1, (base+2)*wUS); !ok || rem != limit-1 {
		t.Errorf("two windows later: allowed %v remaining %d, want a fresh key", ok, rem)
	}
}

func TestScriptCostPeekClockAndExpiry(t *testing.T) {
	s := newScripted(t)
	const base = int64(1_700_000_200)
	t0 := base * wUS
	if ok, rem := s.at("cost", limit, wUS, limit+1, t0); ok || rem != limit {
		t.Errorf("cost over the limit: allowed %v remaining %d", ok, rem)
	}
	if ok, rem := s.at("cost", limit, wUS, 7, t0); !ok || rem != 3 {
		t.Errorf("cost 7: allowed %v remaining %d", ok, rem)
	}
	if ok, rem := s.at("cost", limit, wUS, 4, t0); ok || rem != 3 {
		t.Errorf("cost 4 with 3 left: allowed %v remaining %d", ok, rem)
	}
	// A peek consumes nothing.
	for range 3 {
		if ok, rem := s.at("cost", limit, wUS, 0, t0); !ok || rem != 3 {
			t.Errorf("peek: allowed %v remaining %d, want true 3", ok, rem)
		}
	}
	s.fill("full", base)
	if ok, rem := s.at("full", limit, wUS, 0, t0); ok || rem != 0 {
		t.Errorf("peek when full: allowed %v remaining %d", ok, rem)
	}

	// The clock going back is decided at the stored window's start: the
	// previous 10 still weigh fully, as limitd clamps time.
	s.fill("clock", base)
	if ok, _ := s.at("clock", limit, wUS, 1, (base+1)*wUS+wUS/2); !ok {
		t.Fatal("setup: refused at 50% of the next window")
	}
	if ok, rem := s.at("clock", limit, wUS, 1, t0); ok || rem != 0 {
		t.Errorf("time back into the previous window: allowed %v remaining %d, want refused at the stored window's start", ok, rem)
	}

	// The key expires at the end of the window after its current one.
	ctx := context.Background()
	s.at("ttl", limit, wUS, 1, t0+wUS/4)
	ttl, err := s.tg.rdb.PTTL(ctx, "ttl").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := 1750 * time.Millisecond; ttl > want || ttl < want-time.Second/2 {
		t.Errorf("TTL %v, want about %v", ttl, want)
	}
	// Arguments that would make the integer math inexact are refused.
	if err := s.tg.rdb.EvalSha(ctx, s.tg.sha, []string{"big"}, int64(1)<<30, int64(1)<<30, 1, t0).Err(); err == nil || !strings.Contains(err.Error(), "2^53") {
		t.Errorf("limit·window ≥ 2^53: err %v", err)
	}
}

// The script against limitd's own algorithm, decision for decision, on random
// traffic (several keys, costs 0..4, gaps from 0 to 1.5 windows). Windows are
// long enough that no key's real-time TTL runs out during the test.
func TestScriptMatchesAlgo(t *testing.T) {
	s := newScripted(t)
	for _, tc := range []struct{ limit, windowUS int64 }{{10, wUS}, {3, 1_234_567}, {1000, 60 * wUS}} {
		spec, err := algo.Spec{Algorithm: algo.SlidingWindow, Limit: tc.limit, Window: time.Duration(tc.windowUS) * time.Microsecond}.Validate()
		if err != nil {
			t.Fatalf("algo.Spec.Validate: %v", err)
		}
		r := rand.New(rand.NewPCG(uint64(tc.limit), uint64(tc.windowUS)))
		states := map[string][]byte{}
		now := int64(1_700_000_000) * wUS
		for i := range 2000 {
			now += r.Int64N(tc.windowUS*3/2) / int64(1+r.IntN(20)) // mostly short gaps
			key := fmt.Sprintf("m%d-%d-%d", tc.limit, tc.windowUS, r.IntN(3))
			cost := r.Int64N(5)
			if r.IntN(4) > 0 {
				cost = 1
			}
			d, next, err := algo.Decide(nil, &spec, states[key], now*1000, cost)
			if err != nil {
				t.Fatalf("algo.Decide at step %d: %v", i, err)
			}
			states[key] = next
			ok, rem := s.at(key, tc.limit, tc.windowUS, cost, now)
			if ok != d.Allowed || rem != d.Remaining {
				t.Fatalf("limit %d/%dµs step %d (%s at %d µs, cost %d): redis allowed %v remaining %d, algo %v %d",
					tc.limit, tc.windowUS, i, key, now, cost, ok, rem, d.Allowed, d.Remaining)
			}
		}
	}
}

func TestRedisbenchEndToEnd(t *testing.T) {
	addr := startRedis(t)
	for _, batch := range []string{"1", "10"} {
		var out, errb bytes.Buffer
		prefix := "e2e" + batch + ":"
		code := run([]string{"--addr", addr, "--duration", "300ms", "--warmup", "0", "--concurrency", "4",
			"--keys", "3", "--limit", "5", "--window", "1s", "--batch", batch, "--key-prefix", prefix, "--json", "--label", "r"},
			nil, &out, &errb)
		if code != 0 {
			t.Fatalf("batch %s: exit %d: %s", batch, code, errb.String())
		}
		rs, err := bench.ReadJSONLines(&out)
		if err != nil || len(rs) != 1 {
			t.Fatalf("batch %s: %v %v", batch, rs, err)
		}
		r := rs[0]
		if r.Errors != 0 || r.Checks != r.Allowed+r.Refused || r.Checks == 0 {
			t.Errorf("batch %s: counts %+v", batch, r)
		}
		// Three fresh keys at 5 per second over 0.3 s touch at most two
		// windows: each key admits 5 in the first and at most 10 in all.
		if r.Allowed < 15 || r.Allowed > 30 || r.Refused == 0 {
			t.Errorf("batch %s: %d allowed, %d refused; want 15..30 allowed and refusals", batch, r.Allowed, r.Refused)
		}
		if r.System != "redis" || r.Algorithm != "sliding_window" || r.Limit != 5 || r.Window != "1s" || r.Label != "r" {
			t.Errorf("batch %s: description %+v", batch, r)
		}
		// CPU per check of redis-server (found by its port) and of this
		// load generator.
		if len(r.CPU) != 2 || r.CPU[0].Role != "redis" || r.CPU[0].PID == os.Getpid() || r.CPU[0].CPU <= 0 ||
			r.CPU[1].Role != "load generator" || r.CPU[1].PID != os.Getpid() || r.CPUError != "" {
			t.Errorf("batch %s: CPU %+v (error %q), want redis-server's and ours", batch, r.CPU, r.CPUError)
		}
	}
}

func TestRedisbenchFlagsAndTable(t *testing.T) {
	for _, args := range [][]string{
		{"--window", "1500ns"}, {"--limit", "0"}, {"--cost", "-1"}, {"--dist", "x"}, {"extra"},
	} {
		var errb bytes.Buffer
		if code := run(args, nil, &bytes.Buffer{}, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
	var errb bytes.Buffer
	if code := run([]string{"--addr", "127.0.0.1:1", "--wait", "100ms"}, nil, &bytes.Buffer{}, &errb); code != 1 ||
		!strings.Contains(errb.String(), "redis at 127.0.0.1:1") {
		t.Errorf("unreachable Redis: exit %d, %s", code, errb.String())
	}

	var lines bytes.Buffer
	bench.WriteJSONLine(&lines, bench.Result{System: "redis", Dist: "uniform", Batch: 1, Allowed: 2000, Elapsed: time.Second})
	bench.WriteJSONLine(&lines, bench.Result{System: "limitd", Dist: "uniform", Batch: 100, Allowed: 7000, Elapsed: time.Second})
	var out bytes.Buffer
	if code := run([]string{"table"}, bytes.NewReader(lines.Bytes()), &out, &errb); code != 0 {
		t.Fatalf("table: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "3.50x") || !strings.Contains(out.String(), "vs redis") {
		t.Errorf("table:\n%s", out.String())
	}
	errb.Reset()
	if code := run([]string{"table"}, strings.NewReader(lines.String()+"{oops\n"), &out, &errb); code != 1 || !strings.Contains(errb.String(), "line 3") {
		t.Errorf("bad table input: exit %d, %s", code, errb.String())
	}
}

// The attack workload: hot keys are checked against the hot limit, under
// their own names, and the report splits normal from hot keys.
func TestRedisbenchAttack(t *testing.T) {
	addr := startRedis(t)
	var out, errb bytes.Buffer
	code := run([]string{"--addr", addr, "--duration", "300ms", "--warmup", "0", "--concurrency", "4",
		"--keys", "1000", "--limit", "100", "--window", "10s", "--key-prefix", "atk:",
		"--hot-keys", "2", "--hot-fraction", "0.8", "--hot-limit", "3", "--json"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	rs, err := bench.ReadJSONLines(&out)
	if err != nil || len(rs) != 1 {
		t.Fatalf("%v %v", rs, err)
	}
	r := rs[0]
	if r.Normal == nil || r.Hot == nil || r.HotKeys != 2 || r.HotLimit != 3 {
		t.Fatalf("no attack report: %+v", r)
	}
	// Two hot keys at 3 per 10 s admit exactly 6 within 0.3 s; the normal
	// keys (100 per 10 s, a handful of checks each) are never refused.
	if r.Hot.Allowed != 6 || r.Hot.Refused == 0 || r.Normal.Refused != 0 || r.Normal.Allowed == 0 {
		t.Errorf("hot %+v normal %+v", *r.Hot, *r.Normal)
	}
	if r.Hot.Allowed+r.Hot.Refused+r.Normal.Allowed+r.Normal.Refused != r.Allowed+r.Refused {
		t.Errorf("classes do not add up: hot %+v normal %+v total %d", *r.Hot, *r.Normal, r.Allowed+r.Refused)
	}
	// The script stored the hot keys under their names.
	tg, err := newTarget(context.Background(), targetConfig{Addr: addr, Conns: 1, Timeout: time.Second, Wait: time.Second, KeyPrefix: "atk:"})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	for _, k := range []string{"atk:hot0", "atk:hot1"} {
		if n, err := tg.rdb.Exists(context.Background(), k).Result(); err != nil || n != 1 {
			t.Errorf("key %s: exists %d, %v", k, n, err)
		}
	}
}
