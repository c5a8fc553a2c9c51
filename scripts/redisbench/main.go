// Command redisbench drives Redis with the same workload generator and report
// as `limitd bench`, so the two can be compared side by side (scripts/bench.sh).
//
// Every check is one EVALSHA of slidingwindow.lua, a sliding window counter
// with the semantics of limitd's sliding_window, timed by Redis's own clock.
// A --batch larger than 1 pipelines that many EVALSHAs in one round trip.
//
//	redisbench [flags]            run the workload against --addr
//	redisbench table [FILE...]    print JSON result lines (from limitd bench
//	                              --json and redisbench --json) as one table
//	                              with each run's ratio to Redis
//
// It lives under scripts/ so the daemon never links a Redis client.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/limitd/limitd/bench"
)

//go:embed slidingwindow.lua
var slidingWindowLua string

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "table" {
		return runTable(args[1:], stdin, stdout, stderr)
	}
	return runBench(args, stdout, stderr)
}

const usage = `Usage: redisbench [flags]
       redisbench table [FILE...]

Runs limitd bench's workload (closed loop, or open loop with --rate) against Redis: one EVALSHA of a
sliding-window-counter Lua script per check (limit per window, timed by Redis
TIME). "table" reads JSON result lines (FILEs or standard input) and prints
them as one table with each run's checks/s relative to the Redis run with the
same key distribution.

Flags:
`

func runBench(args []string, stdout, stderr io.Writer) int {
	bench.TuneGC()
	work := bench.DefaultWorkload()
	fs := flag.NewFlagSet("redisbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:6379", "Redis address host:port")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for Redis to answer PING before giving up")
	work.AddFlags(fs)
	limit := fs.Int64("limit", 100, "limit per window")
	window := fs.Duration("window", time.Second, "window (whole microseconds)")
	cost := fs.Int64("cost", 1, "cost of every check (0 is a peek)")
	prefix := fs.String("key-prefix", "bench:", "keys are this prefix followed by a number below --keys")
	timeout := fs.Duration("timeout", 10*time.Second, "per-request timeout")
	jsonOut := fs.Bool("json", false, "print one JSON line instead of the table, and no progress bar")
	label := fs.String("label", "", "name of this run in the JSON line and in comparison tables")
	serverPID := fs.Int("server-pid", 0, "process id of redis-server, to report its CPU per check (0: discover the process listening on --addr's port; -1: do not measure it)")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	err := work.Validate()
	switch {
	case err != nil:
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case *limit < 1:
		err = fmt.Errorf("--limit must be at least 1, got %d", *limit)
	case *window < time.Microsecond || *window%time.Microsecond != 0:
		err = fmt.Errorf("--window must be a whole number of microseconds, got %s", *window)
	case *cost < 0:
		err = fmt.Errorf("--cost must not be negative, got %d", *cost)
	}
	if err != nil {
		fmt.Fprintf(stderr, "redisbench: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t, err := newTarget(ctx, targetConfig{
		Addr: *addr, Conns: work.Conns(), Timeout: *timeout, Wait: *wait,
		KeyPrefix: *prefix, Limit: *limit, WindowUS: window.Microseconds(), Cost: *cost,
		HotLimit: work.HotLimit,
	})
	if err != nil {
		fmt.Fprintf(stderr, "redisbench: %v\n", err)
		return 1
	}
	defer t.Close()

	// CPU per check: Redis (given or found by its port) and this process.
	procs := []bench.ProcessCPU{{Role: "load generator", Name: "redisbench", PID: os.Getpid()}}
	if *serverPID == 0 {
		if _, port, err := net.SplitHostPort(*addr); err == nil {
			if p, err := strconv.Atoi(port); err == nil {
				if *serverPID, err = bench.ListeningPID(p); err != nil {
					fmt.Fprintf(stderr, "redisbench: Redis CPU not measured: %v (use --server-pid)\n", err)
				}
			}
		}
	}
	if *serverPID > 0 {
		procs = append([]bench.ProcessCPU{{Role: "redis", Name: "redis-server", PID: *serverPID}}, procs...)
	}
	work.CPU = bench.NewCPUMeter(procs...)

	var onProgress func(bench.Progress)
	var bar *bench.ProgressBar
	if !*jsonOut && bench.IsTerminal(stderr) {
		bar = bench.NewProgressBar(stderr, work.Warmup+work.Duration)
		onProgress = bar.Update
	}
	res, err := bench.Run(ctx, work, t, onProgress)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		fmt.Fprintf(stderr, "redisbench: %v\n", err)
		return 1
	}
	res.System, res.Label, res.Target, res.Protocol = "redis", *label, "redis://"+*addr, "redis"

	res.Nodes = 1
	res.Algorithm, res.Limit, res.Window, res.Cost = "sliding_window", *limit, window.String(), *cost
	if *jsonOut {
		err = bench.WriteJSONLine(stdout, res)
	} else {
		err = bench.WriteTable(stdout, res)
	}
	if err != nil {
		fmt.Fprintf(stderr, "redisbench: %v\n", err)
		return 1
	}
	if res.Allowed+res.Refused == 0 {
		fmt.Fprintf(stderr, "redisbench: no check was decided; last error: %s\n", res.LastError)
		return 1
	}
	return 0
}

func runTable(files []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var results []bench.Result
	read := func(name string, r io.Reader) bool {
		rs, err := bench.ReadJSONLines(r)
		if err != nil {
			fmt.Fprintf(stderr, "redisbench table: %s: %v\n", name, err)
			return false
		}
		results = append(results, rs...)
		return true
	}
	if len(files) == 0 && !read("standard input", stdin) {
		return 1
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(stderr, "redisbench table: %v\n", err)
			return 1
		}
		ok := read(name, f)
		f.Close()
		if !ok {
			return 1
		}
	}
	if len(results) == 0 {
		fmt.Fprintln(stderr, "redisbench table: no results")
		return 1
	}
	if err := bench.WriteComparison(stdout, results, "redis"); err != nil {
		fmt.Fprintf(stderr, "redisbench table: %v\n", err)
		return 1
	}
	return 0
}

type targetConfig struct {
	Addr      string
	Conns     int
	Timeout   time.Duration
	Wait      time.Duration // for the first PING
	KeyPrefix string
	Limit     int64
	WindowUS  int64
	Cost      int64
	HotLimit  int64 // the attack workload's hot keys' limit per window
}

// target runs the Lua script once per check.
type target struct {
	rdb    *redis.Client
	sha    string
	prefix string
	args   []any // limit, window, cost: the same for every call
	hot    []any // the same for the attack workload's hot keys
}

func newTarget(ctx context.Context, c targetConfig) (*target, error) {
	rdb := redis.NewClient(&redis.Options{
		Addr:     c.Addr,
		Protocol: 2, // plain RESP2: no push notifications, no HELLO round trip
		PoolSize: c.Conns,
		// A retried EVALSHA may count twice, and retries would hide the
		// errors the report is meant to show.
		MaxRetries:   -1,
		DialTimeout:  c.Timeout,
		ReadTimeout:  c.Timeout,
		WriteTimeout: c.Timeout,
		// Nothing but the benchmark's commands on the wire.
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	// Redis may still be starting (bench.sh starts it just before).
	deadline := time.Now().Add(c.Wait)
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			rdb.Close()
			return nil, fmt.Errorf("redis at %s: %w", c.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sha, err := rdb.ScriptLoad(ctx, slidingWindowLua).Result()
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("load the sliding window script into %s: %w", c.Addr, err)
	}
	return &target{
		rdb:    rdb,
		sha:    sha,
		prefix: c.KeyPrefix,
		args: []any{
			strconv.FormatInt(c.Limit, 10), strconv.FormatInt(c.WindowUS, 10), strconv.FormatInt(c.Cost, 10),
		},
		hot: []any{
			strconv.FormatInt(max(c.HotLimit, 1), 10), strconv.FormatInt(c.WindowUS, 10), strconv.FormatInt(c.Cost, 10),
		},
	}, nil
}

func (t *target) Close() error { return t.rdb.Close() }

// key is the key of index i; a hot key (bench.IsHot) is the prefix, "hot"
// and its number, as limitd bench names it.
func (t *target) key(i int) string {
	if bench.IsHot(i) {
		return t.prefix + "hot" + strconv.Itoa(bench.HotNumber(i))
	}
	return t.prefix + strconv.Itoa(i)
}

// Do runs one check; a hot key is checked against the hot limit.
func (t *target) Do(ctx context.Context, keyIndex int) (bool, error) {
	args := t.args
	if bench.IsHot(keyIndex) {
		args = t.hot
	}
	res, err := t.rdb.EvalSha(ctx, t.sha, []string{t.key(keyIndex)}, args...).Int64Slice()
	if err != nil {
		return false, err
	}
	return scriptAllowed(res)
}

// DoBatch pipelines one EVALSHA per check in one round trip.
func (t *target) DoBatch(ctx context.Context, keys []int, out []bench.Outcome) error {
	cmds := make([]*redis.Cmd, len(keys))
	_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.EvalSha(ctx, t.sha, []string{t.key(k)}, t.args...)
		}
		return nil
	})
	// Pipelined reports the first failed command's error: a server error
	// reply belongs to its slot, anything else (the connection) to the batch.
	var reply redis.Error
	if err != nil && !errors.As(err, &reply) {
		return err
	}
	for i, c := range cmds {
		res, err := c.Int64Slice()
		if err != nil {
			out[i] = bench.Outcome{Err: err}
			continue
		}
		allowed, err := scriptAllowed(res)
		out[i] = bench.Outcome{Allowed: allowed, Err: err}
	}
	return nil
}

func scriptAllowed(res []int64) (bool, error) {
	if len(res) != 2 {
		return false, fmt.Errorf("%w: script returned %v", bench.ErrMalformed, res)
	}
	return res[0] == 1, nil
}
