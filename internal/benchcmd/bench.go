package benchcmd

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/limitd/limitd/bench"
	"github.com/limitd/limitd/internal/flagerr"
	"github.com/limitd/limitd/internal/proccluster"
)

const benchUsage = `Usage: limitd bench [flags]

Closed-loop load against limitd: each of --concurrency workers sends its next
check as soon as the previous one is answered, for --warmup (not measured) and
then --duration. Requests go round-robin across --addrs, so checks sent to
followers exercise forwarding to the leader. With --cluster N it starts N
nodes itself (this executable, "serve", free loopback ports, temporary data
directories; node 1 bootstraps, the others join it), benchmarks them and stops
them at the end or on Ctrl-C. Each node gets an equal share of this machine's
CPUs as its GOMAXPROCS (3 nodes on 2 CPUs: 1 each; --node-procs), standing in
for a machine per node.

--target chooses how checks are sent:
  http    POST /v1/check (or /v1/check/batch with --batch), JSON (default);
          sent by the bench's own HTTP/1.1 client, which writes each request
          and reads its answer on the caller's goroutine (--net-http: through
          net/http's client, which costs the generator 1.7–2.6 times the
          CPU per check; on one machine that CPU is taken from the nodes)
  grpc    limitd.v1.Limitd/Check, one check per call (nodes need --grpc-addr:
          --cluster starts them with it; with --addrs give --grpc-addrs)
  rls     envoy.service.ratelimit.v3 ShouldRateLimit, one descriptor with one
          entry per call, against the domain "` + benchRLSDomain + `", which the bench installs
          first (PUT /v1/rls/domains/` + benchRLSDomain + `; admin token if the nodes need one);
          --window must be one unit (1s, 1m, 1h, 24h); needs --grpc-addr like grpc
  client  limitd's Go client (client.New with every address; one client.Check
          per call, so concurrent calls are coalesced into batches as in a
          Go service); the load generator's CPU per check is the client's

Open loop (--rate R): checks are scheduled at R per second (--arrival
constant, or poisson for exponential gaps) whatever the server does, and each
latency counts from the check's scheduled time, so time spent queued behind a
stall counts (a closed loop hides it: its workers stop sending while they
wait). At most --max-inflight checks are in flight; a check due while all are
busy waits, still counted from its schedule. The report adds p99.9 and how
late checks started (the start lag); a run where more than 1% started over
1 ms late is flagged BEHIND SCHEDULE. --concurrency does not apply.

The attack workload (--hot-keys N --hot-fraction F): F of the checks go to N
hot keys whose limit is --hot-limit per --window (inline, same algorithm), far
below their traffic, and the rest to the normal keys as usual. The report then
shows the normal and the hot keys apart (checks/s, counts, p50/p99), so the
normal keys' p99 can be compared with a run without the attack.

A CPU budget per node (--node-cpu 0.25): every node it starts goes into a
cgroup v1 cpu group of its own (/sys/fs/cgroup/cpu/limitd-<pid>-<run>-n<i>)
with a quota of that share of a CPU per --cpu-period (10ms) and GOMAXPROCS
1, so nodes sharing one box stand in for machines of a fixed size;
--generator-cpu gives this process one too, for the measured run. The report
shows each budget, the share of it used and the CFS periods that ended
throttled; a node throttled in 10% of its periods or more counts as held to
its budget, and a run whose generator used over 80% of its budget is VOID (it
measured the generator). A budget caps and does not reserve: the box's load
average at the start is reported beside each run. --nodes 3,6 and --target
client,http make a row of each; --rounds 3 runs the rows alternated three
times and prints each row's medians, CPU per check by role. --row '3
--data-groups=6' (repeatable, instead of --nodes) is a row whose nodes get
flags of their own, so rows that differ in serve flags alternate too. --idle
sends no checks and reports each node's CPU as a share of a core.

At the end it prints checks/s (decided checks: allowed + refused), allowed and
refused counts, p50/p90/p99/max latency per request, errors by class and CPU
per check, or one JSON line with --json. CPU per check is each process's user
+ system CPU time over the measured interval (/proc/PID/stat) divided by the
checks answered: every node by role (leader, follower) and the load
generator itself. "CPU busy" adds those CPU times up over the measured
interval: how many of the machine's CPUs the run kept busy (near all of
them, checks queue for a core and latency says more about the machine than
the system). Before the run it times 200 appends + fsync in the nodes' data
directory (--cluster: the one it made; --fsync-probe DIR otherwise) and prints
them as "disk": every durable check waits for such an append, so that is the
floor of its latency on this disk, which moves from hour to hour on a shared
machine. With --cluster the nodes are known; with --addrs give their
process ids with --pids, or --discover-pids to find the process listening on
each address's port (nodes on this machine). On a terminal a progress bar shows elapsed time,
checks/s and p99 so far.

Examples:
  limitd bench --cluster 3 --duration 15s
  limitd bench --addrs http://10.0.0.1:8080,http://10.0.0.2:8080 --dist zipf
  limitd bench --cluster 3 --rate 3000 --duration 10s
  limitd bench --cluster 3 --batch 100 --json
  limitd bench --cluster 3 --target client
  limitd bench --cluster 3 --target rls
  limitd bench --cluster 3 --hot-keys 10 --hot-fraction 0.9 --hot-limit 1
  limitd bench --cluster 3 --plan bench   (checks resolved by the key's plan)
  limitd bench --nodes 3,6 --node-cpu 0.25 --generator-cpu 0.6 --target client,http --rounds 3
  limitd bench --nodes 3 --node-cpu 0.25 --idle --duration 20s
  limitd bench --row 3 --row '3 --data-groups=6' --node-cpu 0.25 --rounds 3

Flags:
`

// Targets of `limitd bench --target`.
const (
	benchTargetHTTP   = "http"
	benchTargetGRPC   = "grpc"
	benchTargetRLS    = "rls"
	benchTargetClient = "client"
)

// benchRLSDomain is the Envoy rate-limit domain `--target rls` installs and
// asks.
const benchRLSDomain = "limitd-bench"

type benchFlags struct {
	target       string
	grpcAddrs    string
	system       string
	work         bench.Workload
	addrs        string
	cluster      int
	serveFlags   string
	nodeProcs    int
	leaderOnly   bool
	check        bench.CheckSpec
	createPolicy bool
	plan         string // --plan: the plan-resolved workload (plan.go)
	lease        string // JSON lease option of the created policy
	pair         string // bench.PairAcquire or bench.PairReserve: each unit two requests
	timeout      time.Duration
	jsonOut      bool
	adminToken   string
	// --tls-ca, --tls-cert, --tls-key: as the client commands' (internal/cli).
	tlsCA, tlsCert, tlsKey string
	tlsConfig              *tls.Config // built by validate; nil: plaintext
	label                  string
	pids                   string
	discoverPIDs           bool
	externalRLS            bool
	netHTTP                bool
	// hotRefusal is --hot-refusal (attack.go): what refuses the hot keys.
	hotRefusal string
	// CPU budgets and rows (budget.go): --nodes (nodeList), the --target
	// list, --node-cpu, --generator-cpu, --cpu-period, --serve-arg,
	// --rounds, --idle.
	nodes                 string
	nodeList              []int
	rowSpecs              listFlag   // --row, as given
	rowList               []benchRow // --row, read
	targets               []string
	nodeCPU, generatorCPU float64
	cpuPeriod             time.Duration
	serveArgs             listFlag
	cpuShares             int
	rounds                int
	idle                  bool
	result                bench.Result // the last run's report (runOne)
}

// Usage prints `limitd bench`'s help to out.
func Usage(out io.Writer) {
	fs, _ := newBenchFlagSet(out)
	fs.Usage()
}

func newBenchFlagSet(out io.Writer) (*flag.FlagSet, *benchFlags) {
	f := &benchFlags{work: bench.DefaultWorkload()}
	fs := flag.NewFlagSet("limitd bench", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.target, "target", benchTargetHTTP, "how checks are sent: http, grpc, rls or client (see above); a comma-separated list makes a row of each, alternated (see --rounds)")
	fs.StringVar(&f.grpcAddrs, "grpc-addrs", "", "comma-separated gRPC addresses (host:port) of the --addrs nodes, in the same order, for --target grpc and rls")
	fs.StringVar(&f.system, "system", "limitd", "name of the system in the report (e.g. barehttp when --addrs points at scripts/barehttp)")
	fs.StringVar(&f.addrs, "addrs", "", "comma-separated HTTP addresses of running nodes, e.g. http://127.0.0.1:8080,http://127.0.0.1:8081 (default http://127.0.0.1:8080 unless --cluster)")
	fs.IntVar(&f.cluster, "cluster", 0, "start a cluster of N nodes on loopback in temporary directories and bench it (1 is the single-node default deployment); 0 uses --addrs")
	fs.StringVar(&f.nodes, "nodes", "", "like --cluster: start N nodes and bench them; a comma-separated list (3,6) makes a row of each, alternated (see --rounds)")
	fs.Var(&f.rowSpecs, "row", "one row of its own: a node count, then flags for its nodes only, space-separated (--row 3 --row '3 --data-groups=6'); repeatable, instead of --nodes, so rows that differ in serve flags alternate in one run")
	fs.Var(&f.serveArgs, "serve-arg", "one extra flag for every node started, as one word (--serve-arg=--data-groups=3); repeatable, added after --serve-flags")
	fs.Float64Var(&f.nodeCPU, "node-cpu", 0, "CPU budget of every node started, in CPUs (0.25: a quarter of one): each node in a cgroup v1 cpu group of its own with that quota per --cpu-period, GOMAXPROCS 1 unless --node-procs; the report shows each node's share used and throttled periods (Linux, root)")
	fs.Float64Var(&f.generatorCPU, "generator-cpu", 0, "CPU budget of this process, the load generator (with --target client, the Go client), for the measured run; a run in which it used over 80% of it is VOID: it measured the generator")
	fs.DurationVar(&f.cpuPeriod, "cpu-period", proccluster.DefaultCPUPeriod, "CFS period of the CPU budgets: a throttled process waits at most one period for CPU")
	fs.IntVar(&f.cpuShares, "cpu-shares", 0, "cpu.shares of every budgeted group (nodes and generator; 0: the kernel's 1024, one root process's weight): a higher weight makes each budget a reservation on a box others load, at their expense while the run lasts")
	fs.IntVar(&f.rounds, "rounds", 1, "run every row (--nodes × --target) this many times, alternated, then print each row's medians")
	fs.BoolVar(&f.idle, "idle", false, "send no checks: measure each node's CPU over --duration (after --warmup) as a share of a core, the fixed cost of a node with its replicas")
	fs.StringVar(&f.serveFlags, "serve-flags", "", "extra flags for every node started by --cluster, space-separated (e.g. \"--batch-max-wait=200us\")")
	fs.IntVar(&f.nodeProcs, "node-procs", 0, "GOMAXPROCS of every node started by --cluster: 0 gives each node an equal share of this machine's CPUs (at least 1), as if each had a machine of its own; -1 leaves Go's default (every node sized for all CPUs)")
	f.work.AddFlags(fs)
	fs.StringVar(&f.hotRefusal, "hot-refusal", hotRefusalLimit, "attack workload: what refuses the hot keys: limit (their inline limit, answered by the over-limit cache), denied (a deny list matching them) or banned (a policy with on_exceed bans them; --target http)")
	fs.StringVar(&f.check.Algorithm, "algorithm", "sliding_window", "algorithm of the inline limit: fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket")
	fs.Int64Var(&f.check.Limit, "limit", 100, "limit of the inline limit (or of the policy created by --create-policy)")
	fs.StringVar(&f.check.Window, "window", "1s", "window of the inline limit")
	fs.Int64Var(&f.check.Burst, "burst", 0, "burst for token_bucket and leaky_bucket (0: the server's default, = limit)")
	fs.StringVar(&f.check.Policy, "policy", "", "check against this named policy instead of an inline limit")
	fs.StringVar(&f.plan, "plan", "", "the plan-resolved workload: create or replace this plan (one limit, \"main\", from --algorithm, --limit, --window, --burst), make it the default plan, and send checks naming neither policy nor limit")
	fs.BoolVar(&f.createPolicy, "create-policy", false, "create or replace --policy first (PUT /v1/policies/NAME) from --algorithm, --limit, --window, --burst; always done with --cluster")
	fs.StringVar(&f.pair, "pair", "", "with --target client and --policy: each unit of work is a pair, acquire-release (a concurrency policy: acquire and release a slot) or reserve-settle (reserve --cost, settle at half)")
	fs.StringVar(&f.lease, "lease", "", "lease option of the policy created by --create-policy (or --cluster), as its JSON: '{\"share\":0.05,\"max_ttl\":\"2s\"}' (docs/API.md)")
	fs.Int64Var(&f.check.Cost, "cost", 1, "cost of every check (0 is a peek)")
	fs.StringVar(&f.check.KeyPrefix, "key-prefix", "bench:", "keys are this prefix followed by a number below --keys")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "per-request timeout; a request that takes longer counts as a timeout error")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON line instead of the table, and no progress bar")
	fs.StringVar(&f.adminToken, "admin-token", os.Getenv("LIMITD_ADMIN_TOKEN"), "bearer token for --create-policy (default $LIMITD_ADMIN_TOKEN)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "CA bundle that signed the nodes' certificates (default: system roots); any --tls-* flag makes addresses without a scheme https:// and gRPC TLS")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "client certificate file, for nodes that require one (with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "private key file of --tls-cert")
	fs.StringVar(&f.label, "label", "", "name of this run in the JSON line and in comparison tables")
	fs.StringVar(&f.pids, "pids", "", "comma-separated process ids of the --addrs nodes, in the same order, to report their CPU per check")
	fs.BoolVar(&f.leaderOnly, "leader-only", false, "send every request to the leader (found once at the start) instead of round robin over the nodes; CPU is still reported for every node")
	fs.BoolVar(&f.externalRLS, "external-rls", false, "with --target rls and --grpc-addrs: the addresses serve another system's RLS API (e.g. envoyproxy/ratelimit) with the domain \""+benchRLSDomain+"\" configured already; skip the readiness check and the domain install (use --system to name it)")
	fs.BoolVar(&f.netHTTP, "net-http", false, "with --target http: send through net/http's client instead of the bench's own")
	fs.BoolVar(&f.discoverPIDs, "discover-pids", false, "find the process listening on each --addrs port (nodes on this machine) to report their CPU per check")
	fs.Usage = func() {
		fmt.Fprint(out, benchUsage)
		fs.PrintDefaults()
	}
	return fs, f
}

// Main is `limitd bench` with args, the words after its name. Exit status: 0 when checks were decided, 1 when
// the run could not be set up or nothing was decided, 2 for bad flags.
func Main(args []string, stdout, stderr io.Writer) int {
	bench.TuneGC()
	fs, f := newBenchFlagSet(stderr)
	if err := flagerr.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return 0
		}
		fmt.Fprintf(stderr, "limitd bench: %v; run 'limitd bench --help' for the flags\n", err)
		return 2
	}
	runs, err := f.prepareRows(fs)
	if err != nil {
		fmt.Fprintf(stderr, "limitd bench: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := f.runRows(ctx, runs, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "limitd bench: %v\n", err)
		return 1
	}
	return 0
}

// prepareRows reads --nodes and the --target list and validates every
// row (budget.go) before any runs.
func (f *benchFlags) prepareRows(fs *flag.FlagSet) ([]*benchFlags, error) {
	if f.nodes != "" {
		if f.cluster != 0 {
			return nil, errors.New("--nodes and --cluster are the same flag: give one")
		}
		var err error
		if f.nodeList, err = parseNodes(f.nodes); err != nil {
			return nil, err
		}
		f.cluster = f.nodeList[0]
	}
	if len(f.rowSpecs) > 0 {
		if f.nodes != "" || f.cluster != 0 {
			return nil, errors.New("--row names each row's nodes: not with --nodes or --cluster")
		}
		for _, spec := range f.rowSpecs {
			r, err := parseRow(spec)
			if err != nil {
				return nil, err
			}
			f.rowList = append(f.rowList, r)
		}
		f.cluster = f.rowList[0].nodes
	}
	f.targets = splitList(f.target)
	if len(f.targets) == 0 {
		f.targets = []string{""} // validate names the empty target
	}
	if (len(f.nodeList) > 1 || len(f.rowList) > 0) && f.addrs != "" {
		return nil, errors.New("--cluster and --addrs exclude each other")
	}
	if err := f.validateBudget(); err != nil {
		return nil, err
	}
	var runs []*benchFlags
	for _, r := range f.rows() {
		c, err := f.forRow(fs, r)
		if err != nil {
			if len(f.rows()) == 1 {
				err = errors.Unwrap(err) // one run: its own message, as before rows
			}
			return nil, err
		}
		runs = append(runs, c)
	}
	return runs, nil
}

func (f *benchFlags) validate(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := f.work.Validate(); err != nil {
		return err
	}
	switch f.target {
	case benchTargetHTTP, benchTargetGRPC, benchTargetRLS, benchTargetClient:
	default:
		return fmt.Errorf("--target must be http, grpc, rls or client, got %q", f.target)
	}
	grpc := f.target == benchTargetGRPC || f.target == benchTargetRLS
	switch {
	case f.netHTTP && f.target != benchTargetHTTP:
		return fmt.Errorf("--net-http is for --target http, not --target %s", f.target)
	case f.work.Batch > 1 && f.target != benchTargetHTTP:
		return fmt.Errorf("--batch is for --target http: --target %s sends single checks", f.target)
	case f.grpcAddrs != "" && !grpc:
		return errors.New("--grpc-addrs is for --target grpc and rls")
	case f.grpcAddrs != "" && f.cluster > 0:
		return errors.New("--grpc-addrs is for --addrs: --cluster starts its nodes with gRPC")
	case grpc && f.cluster == 0 && f.grpcAddrs == "":
		return fmt.Errorf("--target %s needs --grpc-addrs (or --cluster)", f.target)
	case grpc && f.cluster == 0 && len(splitList(f.grpcAddrs)) != len(splitAddrs(f.addrs)) && f.addrs != "":
		return fmt.Errorf("--grpc-addrs lists %d addresses for %d --addrs", len(splitList(f.grpcAddrs)), len(splitAddrs(f.addrs)))
	case f.target == benchTargetRLS && f.check.Policy != "":
		return errors.New("--target rls checks the limit of the domain it installs: --policy does not apply")
	case f.externalRLS && (f.target != benchTargetRLS || f.cluster > 0 || f.grpcAddrs == "" || f.leaderOnly):
		return errors.New("--external-rls is for --target rls with --grpc-addrs, without --cluster or --leader-only")
	case f.target == benchTargetClient && f.check.Cost == 0:
		return errors.New("--target client cannot peek (--cost 0): the Go client's Check always spends")
	case f.pair != "" && f.pair != bench.PairAcquire && f.pair != bench.PairReserve:
		return fmt.Errorf("--pair must be %s or %s, got %q", bench.PairAcquire, bench.PairReserve, f.pair)
	case f.pair != "" && (f.target != benchTargetClient || f.check.Policy == "" || f.createPolicy || f.cluster > 0):
		return errors.New("--pair needs --target client and an existing --policy (a concurrency policy for acquire-release), without --create-policy or --cluster")
	}
	if f.target == benchTargetRLS {
		f.check.HotLimit = f.work.HotLimit
		if _, err := bench.RLSDomainConfig(benchRLSDomain, f.check); err != nil {
			return fmt.Errorf("--target rls: %w", err)
		}
	}
	switch {
	case f.cluster < 0:
		return fmt.Errorf("--cluster must not be negative, got %d", f.cluster)
	case f.cluster > 0 && f.addrs != "":
		return errors.New("--cluster and --addrs exclude each other")
	case f.nodeProcs < -1:
		return fmt.Errorf("--node-procs must be -1, 0 or a number of CPUs, got %d", f.nodeProcs)
	case f.check.Cost < 0:
		return fmt.Errorf("--cost must not be negative, got %d", f.check.Cost)
	case f.check.Policy == "" && f.createPolicy:
		return errors.New("--create-policy needs --policy")
	case f.plan != "" && f.check.Policy != "":
		return errors.New("--plan and --policy exclude each other (a plan check names no policy)")
	case f.plan != "" && f.target == benchTargetRLS:
		return errors.New("--plan: the rls target checks its own domain's limits, not a plan")
	case f.timeout <= 0:
		return fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	case f.cluster > 0 && (f.pids != "" || f.discoverPIDs):
		return errors.New("--pids and --discover-pids are for --addrs: --cluster knows its nodes")
	case f.pids != "" && f.discoverPIDs:
		return errors.New("--pids and --discover-pids exclude each other")
	}
	if f.pids != "" {
		if _, err := parsePIDs(f.pids); err != nil {
			return err
		}
		n, m, of := len(strings.Split(f.pids, ",")), len(splitAddrs(f.addrs)), "--addrs"
		if f.externalRLS {
			m, of = len(splitList(f.grpcAddrs)), "--grpc-addrs" // another system's servers
		}
		if n != m {
			return fmt.Errorf("--pids lists %d process ids for %d %s", n, m, of)
		}
	}
	if f.addrs == "" && f.cluster == 0 {
		f.addrs = "http://127.0.0.1:8080"
		if grpc && len(splitList(f.grpcAddrs)) != 1 {
			return fmt.Errorf("--grpc-addrs lists %d addresses for 1 --addrs", len(splitList(f.grpcAddrs)))
		}
	}
	f.check.HotLimit = f.work.HotLimit
	if err := f.validateHotRefusal(); err != nil { // attack.go
		return err
	}
	return f.loadTLS()
}

// loadTLS builds the TLS configuration of --tls-ca, --tls-cert and
// --tls-key, with the client commands' rules and messages.
func (f *benchFlags) loadTLS() error {
	httpClient = http.DefaultClient
	if f.tlsCA == "" && f.tlsCert == "" && f.tlsKey == "" {
		return nil
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if f.cluster > 0 {
		return errors.New("--tls-* are for --addrs: the nodes --cluster starts serve plain HTTP on loopback")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--tls-ca %s: no certificates found", f.tlsCA)
		}
		tc.RootCAs = pool
	}
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	f.tlsConfig = tc
	httpClient = &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: tc}}
	return nil
}

// httpClient makes the bench's own requests (readiness, policy, leader,
// stage scrapes): with --tls-*, over TLS with their configuration.
var httpClient = http.DefaultClient

// getReady is GET /readyz through httpClient.
func getReady(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET /readyz: %s %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// runOne is one run: start the nodes (--cluster), bench them, print the
// report, stop them.
func (f *benchFlags) runOne(ctx context.Context, stdout, stderr io.Writer) (bench.Result, error) {
	c := *f // run sets fields for its own cluster (the fsync probe's directory): a round's stay its own
	err := c.run(ctx, stdout, stderr)
	return c.result, err
}

func (f *benchFlags) run(ctx context.Context, stdout, stderr io.Writer) error {
	loadAvg := loadAvg1()
	addrs := splitAddrs(f.addrs)
	if f.tlsConfig != nil {
		// With --tls-*, an address without a scheme is https (as the CLI's).
		addrs = splitAddrsDefault(f.addrs, "https")
	}
	grpcAddrs := splitList(f.grpcAddrs)
	nodes := len(addrs)
	var c *proccluster.Cluster
	if f.cluster > 0 {
		procs := nodeProcs(f.nodeProcs, f.cluster, runtime.NumCPU())
		if f.nodeCPU > 0 && f.nodeProcs == 0 {
			procs = 1 // one thread per fraction of a CPU: more would queue on the quota
		}
		share := "Go's default GOMAXPROCS"
		if procs > 0 {
			share = fmt.Sprintf("GOMAXPROCS %d each, %d CPUs", procs, runtime.NumCPU())
		}
		if f.nodeCPU > 0 {
			share += fmt.Sprintf(", %g CPU each (cgroup, %s period)", f.nodeCPU, f.cpuPeriod)
		}
		fmt.Fprintf(stderr, "limitd bench: starting a %d-node cluster on loopback (%s)\n", f.cluster, share)
		began := time.Now()
		var err error
		c, err = startBenchCluster(ctx, f.cluster, proccluster.Options{
			Extra:     append(strings.Fields(f.serveFlags), f.serveArgs...),
			GRPC:      f.target == benchTargetGRPC || f.target == benchTargetRLS,
			Procs:     procs,
			NodeCPU:   f.nodeCPU,
			CPUPeriod: f.cpuPeriod,
			CPUShares: f.cpuShares,
		})
		if err != nil {
			return err
		}
		defer func() {
			if err := c.Stop(); err != nil {
				fmt.Fprintf(stderr, "limitd bench: %v\n", err)
			}
		}()
		fmt.Fprintf(stderr, "limitd bench: cluster ready in %s\n", time.Since(began).Round(10*time.Millisecond))
		if f.work.FsyncProbeDir == "" {
			// The nodes' logs share this directory's disk.
			f.work.FsyncProbeDir = c.Dir
		}
		addrs, nodes = c.Addrs(), f.cluster
		for _, nd := range c.Nodes {
			grpcAddrs = append(grpcAddrs, nd.GRPCAddr)
		}
	} else if !f.externalRLS {
		if err := waitBenchReady(ctx, addrs, benchReadyWait); err != nil {
			return err
		}
	}
	if f.check.Policy != "" && (f.createPolicy || f.cluster > 0) {
		if err := putBenchPolicy(ctx, addrs[0], f.adminToken, f.check, f.lease); err != nil {
			return err
		}
	}
	if err := f.setUpHotRefusal(ctx, addrs[0]); err != nil { // attack.go
		return err
	}
	if f.plan != "" {
		if err := putBenchPlan(ctx, addrs[0], f.adminToken, f.plan, f.check); err != nil { // plan.go
			return err
		}
		f.check.ByPlan = true
	}

	// After the nodes are forked: a child forked inside the generator's
	// group would be born in it.
	gen, leaveGen, err := f.generatorGroup()
	if err != nil {
		return err
	}
	defer func() {
		if err := leaveGen(); err != nil {
			fmt.Fprintf(stderr, "limitd bench: %v\n", err)
		}
	}()
	procs, err := f.measuredProcesses(ctx, c, addrs)
	if err != nil {
		return err
	}
	for i := range procs {
		switch {
		case procs[i].Role == "load generator" && gen != nil:
			procs[i].Budget, procs[i].ReadThrottle = gen.CPU, throttleOf(gen)
		case c != nil && i < len(c.Nodes) && c.Nodes[i].CPUGroup != nil:
			g := c.Nodes[i].CPUGroup
			procs[i].Budget, procs[i].ReadThrottle = g.CPU, throttleOf(g)
		}
	}
	allAddrs := addrs
	f.work.CPU = bench.NewCPUMeter(procs...)

	if f.leaderOnly {
		i, err := leaderIndex(ctx, addrs, f.adminToken)
		if err != nil {
			return err
		}
		addrs = addrs[i : i+1]
		if len(grpcAddrs) > i {
			grpcAddrs = grpcAddrs[i : i+1]
		}
	}
	if f.target == benchTargetRLS && !f.externalRLS {
		if err := putBenchRLSDomain(ctx, addrs, f.adminToken, f.check); err != nil {
			return err
		}
	}
	target, closeTarget, err := f.newTarget(addrs, grpcAddrs)
	if err != nil {
		return err
	}
	defer closeTarget()

	// The latency budget: every node's stage histograms before and after.
	var stageNodes, stageAddrs []string
	if !f.externalRLS {
		for i, a := range allAddrs {
			name := a
			if i < len(procs) && procs[i].Role != "load generator" {
				name = procs[i].Role + " " + procs[i].Name
			}
			stageNodes, stageAddrs = append(stageNodes, name), append(stageAddrs, a)
		}
	}
	before := scrapeStages(ctx, stageNodes, stageAddrs, f.adminToken)
	// Raft entries count over the measured interval only, like the checks.
	var measured []bench.Scrape
	var measuredMu sync.Mutex
	if before != nil {
		f.work.Measuring = func() {
			s := scrapeStages(ctx, stageNodes, stageAddrs, f.adminToken)
			measuredMu.Lock()
			measured = s
			measuredMu.Unlock()
		}
	}

	if f.idle {
		res, err := idleRun(ctx, f.work)
		if err != nil {
			return err
		}
		res.System, res.Label, res.Nodes, res.LoadAvg, res.Target = f.system, f.label, nodes, loadAvg, strings.Join(allAddrs, ",")
		f.result = res
		if f.jsonOut {
			return bench.WriteJSONLine(stdout, res)
		}
		return writeIdle(stdout, res)
	}

	var onProgress func(bench.Progress)
	var bar *bench.ProgressBar
	if !f.jsonOut && bench.IsTerminal(stderr) {
		bar = bench.NewProgressBar(stderr, f.work.Warmup+f.work.Duration)
		onProgress = bar.Update
	}
	res, err := bench.Run(ctx, f.work, target, onProgress)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return err
	}
	if before != nil {
		if after := scrapeStages(ctx, stageNodes, stageAddrs, f.adminToken); after != nil {
			res.Stages = bench.StageBudget(before, after)
			measuredMu.Lock()
			if measured != nil {
				res.RaftEntries, _ = bench.RaftEntries(measured, after)
			}
			measuredMu.Unlock()
		}
	}
	if ct, ok := target.(*bench.ClientTarget); ok {
		// How much the client coalesced explains its CPU per check.
		st := ct.Stats()
		fmt.Fprintf(stderr, "limitd bench: Go client sent %d batches for %d checks (%.1f per batch, warm-up included), %d retries, %d leader changes\n",
			st.Batches, st.Checks, float64(st.Checks)/float64(max(st.Batches, 1)), st.Retries, st.LeaderChanges)
	}
	if c != nil {
		res.DiskBytes, res.RSSBytes = c.Footprint()
	}
	res.System = f.system
	res.Label = f.label
	res.LoadAvg = loadAvg
	res.Protocol = f.target
	if f.netHTTP {
		res.Protocol = "net/http" // HTTP through net/http's client, not the bench's own
	}
	res.Target = strings.Join(addrs, ",")
	if f.target == benchTargetGRPC || f.target == benchTargetRLS {
		res.Target = strings.Join(grpcAddrs, ",")
	}
	res.Nodes = nodes
	res.Cost = f.check.Cost
	if f.target == benchTargetRLS {
		res.Algorithm, res.Limit, res.Window = "rls:"+f.check.Algorithm, f.check.Limit, f.check.Window
	} else if f.check.Policy != "" {
		res.Algorithm = "policy:" + f.check.Policy
		if f.createPolicy || f.cluster > 0 {
			res.Limit, res.Window = f.check.Limit, f.check.Window
		}
	} else {
		res.Algorithm, res.Limit, res.Window = f.check.Algorithm, f.check.Limit, f.check.Window
	}
	f.result = res
	if f.jsonOut {
		err = bench.WriteJSONLine(stdout, res)
	} else if err = bench.WriteTable(stdout, res); err == nil && len(res.Stages) > 0 {
		fmt.Fprintln(stdout)
		err = bench.WriteStages(stdout, res.Stages)
	}
	if err != nil {
		return err
	}
	if res.Allowed+res.Refused == 0 {
		if res.LastError != "" {
			return fmt.Errorf("no check was decided; last error: %s", res.LastError)
		}
		return errors.New("no check was decided")
	}
	return nil
}

// measuredProcesses lists the processes whose CPU the run measures: every
// node (by its role now: leader or follower) and this load generator.
func (f *benchFlags) measuredProcesses(ctx context.Context, c *proccluster.Cluster, addrs []string) ([]bench.ProcessCPU, error) {
	var pids []int
	var names []string
	switch {
	case c != nil:
		for _, nd := range c.Nodes {
			pids, names = append(pids, nd.PID()), append(names, nd.ID)
		}
	case f.pids != "":
		pids, _ = parsePIDs(f.pids)
		names = addrs
		if f.externalRLS {
			names = splitList(f.grpcAddrs)
		}
	case f.discoverPIDs:
		for _, a := range addrs {
			u, err := url.Parse(a)
			if err != nil {
				return nil, fmt.Errorf("--discover-pids: %w", err)
			}
			port, err := strconv.Atoi(u.Port())
			if err != nil {
				return nil, fmt.Errorf("--discover-pids: %s has no port", a)
			}
			pid, err := bench.ListeningPID(port)
			if err != nil {
				return nil, fmt.Errorf("--discover-pids: %s: %w", a, err)
			}
			pids, names = append(pids, pid), append(names, a)
		}
	}
	var procs []bench.ProcessCPU
	for i, pid := range pids {
		role := "server" // another system's: it has no /v1/cluster
		if !f.externalRLS {
			role = nodeRole(ctx, addrs[i], f.adminToken)
		}
		procs = append(procs, bench.ProcessCPU{Role: role, Name: names[i], PID: pid})
	}
	name := "limitd bench"
	if f.target == benchTargetClient {
		name = "limitd bench (Go client)"
	}
	return append(procs, bench.ProcessCPU{Role: "load generator", Name: name, PID: os.Getpid()}), nil
}

// nodeRole asks a node for its Raft state: "leader", "follower", or "node"
// when it does not say.
func nodeRole(ctx context.Context, addr, token string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/v1/cluster", nil)
	if err != nil {
		return "node"
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return "node"
	}
	defer resp.Body.Close()
	var st struct {
		State string `json:"state"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return "node"
	}
	switch strings.ToLower(st.State) {
	case "leader":
		return "leader"
	case "follower":
		return "follower"
	}
	return "node"
}

// leaderIndex is the index of the node of addrs that says it leads
// (--leader-only); it waits up to benchReadyWait for one to.
func leaderIndex(ctx context.Context, addrs []string, token string) (int, error) {
	deadline := time.Now().Add(benchReadyWait)
	for {
		for i, a := range addrs {
			if nodeRole(ctx, a, token) == "leader" {
				return i, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("--leader-only: none of %s says it leads", strings.Join(addrs, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scrapeStages reads every node's stage series, or nil when one cannot be
// read (a system that is not limitd, or a node without /metrics): the
// budget is then left out, not reported for some nodes only.
func scrapeStages(ctx context.Context, nodes, addrs []string, token string) []bench.Scrape {
	if len(addrs) == 0 {
		return nil
	}
	out := make([]bench.Scrape, len(addrs))
	for i, a := range addrs {
		s, err := bench.ScrapeStages(ctx, httpClient, nodes[i], a, token)
		if err != nil {
			return nil
		}
		out[i] = s
	}
	return out
}

// parsePIDs reads "12,34" into process ids.
func parsePIDs(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		pid, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("--pids: %q is not a process id", p)
		}
		out = append(out, pid)
	}
	return out, nil
}

// splitAddrs turns "a:1, http://b:2/" into base URLs.
func splitAddrs(s string) []string { return splitAddrsDefault(s, "http") }

// splitAddrsDefault is splitAddrs with scheme for addresses that name none.
func splitAddrsDefault(s, scheme string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimRight(strings.TrimSpace(a), "/")
		if a == "" {
			continue
		}
		if !strings.Contains(a, "://") {
			a = scheme + "://" + a
		}
		out = append(out, a)
	}
	return out
}

// waitBenchReady checks that every node answers /readyz with 200 within wait,
// so a misconfigured run fails at once instead of counting errors.
func waitBenchReady(ctx context.Context, addrs []string, wait time.Duration) error {
	if len(addrs) == 0 {
		return errors.New("no addresses in --addrs")
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for _, a := range addrs {
		var last error
		for {
			err := getReady(ctx, a)
			if err == nil {
				break
			}
			// An attempt cut off by the deadline says less than the
			// node's own answer to an earlier one: keep that.
			if last == nil || ctx.Err() == nil {
				last = err
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s is not ready: %w", a, last)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// putBenchPolicy creates or replaces the policy the checks use.
func putBenchPolicy(ctx context.Context, addr, token string, c bench.CheckSpec, lease string) error {
	var rawLease json.RawMessage
	if lease != "" {
		rawLease = json.RawMessage(lease) // the server validates it and names the field
	}
	body, err := json.Marshal(struct {
		Algorithm string          `json:"algorithm"`
		Limit     int64           `json:"limit"`
		Window    string          `json:"window,omitempty"`
		Burst     int64           `json:"burst,omitempty"`
		Lease     json.RawMessage `json:"lease,omitempty"`
	}{c.Algorithm, c.Limit, c.Window, c.Burst, rawLease})
	if err != nil {
		return err
	}
	u := addr + "/v1/policies/" + url.PathEscape(c.Policy)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("create policy %q: %w", c.Policy, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("create policy %q: PUT %s: %s %s", c.Policy, u, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// benchReadyWait is how long running nodes (--addrs) may take to be ready.
var benchReadyWait = 5 * time.Second

// nodeProcs is the GOMAXPROCS that the --node-procs flag gives each of n nodes
// on a machine of cpus CPUs (0: none set, Go's default). Nodes sharing one
// machine stand in for machines of their own: each sized for every CPU,
// their runtimes' idle threads spin and wake against each other (about an
// eighth of a node's CPU per request in the 3-node attack run), which
// separate machines would not pay.
func nodeProcs(flag, n, cpus int) int {
	switch {
	case flag > 0:
		return flag
	case flag < 0 || n <= 0:
		return 0
	}
	return max(1, cpus/n)
}

// startBenchCluster starts n nodes named bench1..benchN in a new temporary
// directory, which stop removes.
func startBenchCluster(ctx context.Context, n int, o proccluster.Options) (*proccluster.Cluster, error) {
	dir, err := os.MkdirTemp("", "limitd-bench-")
	if err != nil {
		return nil, fmt.Errorf("create cluster directory: %w", err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench%d", i+1)
	}
	c, err := proccluster.StartOpts(ctx, dir, ids, o)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// newTarget builds the --target's load generator, and what closes it.
func (f *benchFlags) newTarget(addrs, grpcAddrs []string) (bench.Target, func(), error) {
	switch f.target {
	case benchTargetGRPC:
		t, err := bench.NewGRPCTarget(bench.GRPCConfig{Addrs: grpcAddrs, Check: f.check, Timeout: f.timeout, TLS: f.tlsConfig})
		if err != nil {
			return nil, nil, err
		}
		return t, t.Close, nil
	case benchTargetRLS:
		t, err := bench.NewRLSTarget(bench.GRPCConfig{Addrs: grpcAddrs, Check: f.check, RLSDomain: benchRLSDomain, Timeout: f.timeout, TLS: f.tlsConfig})
		if err != nil {
			return nil, nil, err
		}
		return t, t.Close, nil
	case benchTargetClient:
		t, err := bench.NewClientTarget(bench.ClientConfig{Addrs: addrs, Check: f.check, Timeout: f.timeout, TLS: f.tlsConfig,
			Pair: f.pair, PairHold: time.Minute})
		if err != nil {
			return nil, nil, err
		}
		return t, t.Close, nil
	}
	t, err := bench.NewHTTPTarget(bench.HTTPConfig{
		Addrs: addrs, Check: f.check, Concurrency: f.work.Conns(), Timeout: f.timeout, NetHTTP: f.netHTTP, TLS: f.tlsConfig,
	})
	if err != nil {
		return nil, nil, err
	}
	return t, t.Close, nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// putBenchRLSDomain installs the --target rls domain through the first
// node and waits until every node has applied it, so no check of the run
// meets a node that does not know the domain yet.
func putBenchRLSDomain(ctx context.Context, addrs []string, token string, c bench.CheckSpec) error {
	cfg, err := bench.RLSDomainConfig(benchRLSDomain, c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	do := func(method, u string, body []byte) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/yaml")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return httpClient.Do(req)
	}
	path := "/v1/rls/domains/" + url.PathEscape(benchRLSDomain)
	resp, err := do(http.MethodPut, addrs[0]+path, []byte(cfg))
	if err != nil {
		return fmt.Errorf("install RLS domain %q: %w", benchRLSDomain, err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("install RLS domain %q: PUT %s: %s %s", benchRLSDomain, addrs[0]+path, resp.Status, bytes.TrimSpace(b))
	}
	for _, a := range addrs[1:] {
		for {
			resp, err := do(http.MethodGet, a+path, nil)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("RLS domain %q not applied on %s: %v", benchRLSDomain, a, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}
