package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/persist"
)

type serveFlags struct {
	nodeID, httpAddr, raftAddr, dataDir, join string
	httpAdvertise, raftAdvertise              string
	adminToken, tlsCert, tlsKey, tlsCA        string
	policies, authKeySource, logLevel         string
	logStore                                  string
	batchMaxOps, batchInflight, maxBatch      int
	fsmCommitEvery                            int
	fsmCacheKeys                              int
	batchMaxWait, retention, applyTimeout     time.Duration
	snapshotInterval, fsmFlushInterval        time.Duration
	snapshotThreshold, trailingLogs           uint64
	pprof                                     bool
	gcPercent                                 int
	memoryLimit                               int64
}

func newServeFlagSet(out io.Writer) (*flag.FlagSet, *serveFlags) {
	f := &serveFlags{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.nodeID, "node-id", "", "unique Raft server ID of this node (default: the --raft-addr)")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:8080", "address the HTTP API listens on")
	fs.StringVar(&f.raftAddr, "raft-addr", "127.0.0.1:8300", "address the Raft transport listens on")
	fs.StringVar(&f.httpAdvertise, "http-advertise", "", "HTTP address other nodes use to reach this one (default: --http-addr)")
	fs.StringVar(&f.raftAdvertise, "raft-advertise", "", "Raft address other nodes use to reach this one (default: --raft-addr)")
	fs.StringVar(&f.dataDir, "data-dir", "./limitd-data", "directory for the Raft log, snapshots and the state database")
	fs.StringVar(&f.join, "join", "", "HTTP address of any cluster member to join (e.g. http://10.0.0.1:8080); without it a fresh node bootstraps a single-node cluster")
	fs.StringVar(&f.adminToken, "admin-token", "", "bearer token required by admin endpoints (policies, key reset, membership) and node-to-node requests")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "certificate file: serve HTTPS (with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "private key file for --tls-cert")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "CA bundle to verify other nodes' certificates when forwarding (default: system roots)")
	fs.StringVar(&f.policies, "policies", "", "JSON file of policies to create or update at start")
	fs.StringVar(&f.authKeySource, "auth-key-source", "", "where /v1/auth/{policy} takes the key from: header:NAME, query:NAME or ip (default: see docs/API.md)")
	fs.IntVar(&f.maxBatch, "max-batch", 1000, "maximum checks in one /v1/check/batch or /v1/check/all request")
	fs.IntVar(&f.batchMaxOps, "batch-max-ops", 2048, "group commit: maximum ops in one Raft log entry")
	fs.IntVar(&f.batchInflight, "batch-inflight", 2, "group commit: log entries in flight at once; more arrivals wait and form the next entry")
	fs.DurationVar(&f.batchMaxWait, "batch-max-wait", 0, "group commit: how long a batch that is not full may wait for more ops (0: natural batching only)")
	fs.IntVar(&f.fsmCommitEvery, "fsm-commit-every", 1000, "state database: applied log batches that share one bbolt commit (1: commit each)")
	fs.IntVar(&f.fsmCacheKeys, "fsm-cache-keys", persist.DefaultCacheKeys, "state machine: keys whose decoded state stays in memory after a commit (about 120 bytes each); the keys written since the last commit come on top")
	fs.DurationVar(&f.fsmFlushInterval, "fsm-flush-interval", 100*time.Millisecond, "state database: commit pending applies at least this often")
	fs.StringVar(&f.logStore, "log-store", "", "Raft log store: wal (hashicorp/raft-wal, one fsync per append; the default for a new data directory) or boltdb (hashicorp/raft-boltdb, two); empty: whichever the data directory already uses")
	fs.DurationVar(&f.retention, "request-id-retention", 10*time.Minute, "how long a request_id's decision is remembered for safe retries")
	fs.DurationVar(&f.applyTimeout, "apply-timeout", 5*time.Second, "how long a proposal may wait for the Raft leader")
	fs.Uint64Var(&f.snapshotThreshold, "snapshot-threshold", 4096, "take a Raft snapshot once this many log entries follow the last one (checked every --snapshot-interval)")
	fs.DurationVar(&f.snapshotInterval, "snapshot-interval", 30*time.Second, "how often to check whether a snapshot is due")
	fs.Uint64Var(&f.trailingLogs, "trailing-logs", 2048, "log entries kept after a snapshot, so a lagging follower can catch up without one")
	fs.StringVar(&f.logLevel, "log-level", "warn", "Raft log level: trace, debug, info, warn, error")
	fs.IntVar(&f.gcPercent, "gc-percent", 400, "Go garbage collector target percent, like GOGC (which wins when set; 0 keeps Go's default of 100): the live heap is small, so a higher target trades some memory for CPU")
	fs.Int64Var(&f.memoryLimit, "memory-limit-mib", 512, "soft limit of the Go heap in MiB, like GOMEMLIMIT (which wins when set; 0: none): with --gc-percent above 100 the heap grows less eagerly once it is this large")
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go profiling endpoints under /debug/pprof/")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: limitd [serve] [flags]\n\nRuns a limitd node. Every flag can also be set with an environment variable:\nLIMITD_ and the flag name in upper case with - as _ (e.g. LIMITD_DATA_DIR).\nA flag on the command line wins over the environment.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs, f
}

// applyEnv sets every flag not given on the command line from LIMITD_<NAME>.
func applyEnv(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		env := "LIMITD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %w", env, e)
			}
		}
	})
	return err
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs, f := newServeFlagSet(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := applyEnv(fs); err != nil {
		fmt.Fprintln(stderr, "limitd:", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "limitd serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		fmt.Fprintln(stderr, "limitd: --tls-cert and --tls-key go together")
		return 2
	}
	logger := log.New(stderr, "limitd: ", log.LstdFlags)
	if err := serve(f, logger); err != nil {
		logger.Print(err)
		return 1
	}
	return 0
}

// tuneGC applies --gc-percent and --memory-limit-mib unless GOGC or
// GOMEMLIMIT are set. A high GC target saves CPU while the live heap is
// small; the soft memory limit makes the collector work harder instead of
// letting the heap reach gc-percent times a large live heap (1,000,000 keys:
// 1.4 GiB of RSS at 400 without the limit).
func tuneGC(gcPercent int, memoryLimitMiB int64, getenv func(string) string) {
	if getenv("GOGC") == "" && gcPercent != 0 {
		debug.SetGCPercent(gcPercent)
	}
	if getenv("GOMEMLIMIT") == "" && memoryLimitMiB > 0 {
		debug.SetMemoryLimit(memoryLimitMiB << 20)
	}
}

func serve(f *serveFlags, logger *log.Logger) error {
	tuneGC(f.gcPercent, f.memoryLimit, os.Getenv)
	var policies []fsm.Policy
	if f.policies != "" {
		var err error
		if policies, err = api.LoadPolicies(f.policies); err != nil {
			return err
		}
	}
	apiCfg := api.Config{
		AdminToken:    f.adminToken,
		AuthKeySource: f.authKeySource,
		MaxBatch:      f.maxBatch,
		// Longer than a forwarded proposal may take, so the store, not the
		// HTTP deadline, decides between "no leader" and "outcome unknown".
		RequestTimeout: f.applyTimeout + 2*time.Second,
	}
	if err := apiCfg.Validate(); err != nil {
		return err
	}
	httpAdv := f.httpAdvertise
	if httpAdv == "" {
		httpAdv = f.httpAddr
	}
	raftAdv := f.raftAdvertise
	if raftAdv == "" {
		raftAdv = f.raftAddr
	}
	scheme, client, err := forwardingClient(f)
	if err != nil {
		return err
	}
	// Listen before Raft starts so a bad --http-addr fails fast, and so the
	// node can answer forwarded requests as soon as it is a member.
	ln, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		return fmt.Errorf("listen http %s: %w", f.httpAddr, err)
	}
	node, err := cluster.Open(cluster.Config{
		NodeID:             f.nodeID,
		RaftAddr:           raftAdv,
		RaftBind:           f.raftAddr,
		HTTPAddr:           httpAdv,
		DataDir:            f.dataDir,
		HTTPScheme:         scheme,
		HTTPClient:         client,
		AdminToken:         f.adminToken,
		BatchMaxOps:        f.batchMaxOps,
		BatchInflight:      f.batchInflight,
		BatchMaxWait:       f.batchMaxWait,
		FSMCommitEvery:     f.fsmCommitEvery,
		FSMCacheKeys:       f.fsmCacheKeys,
		FSMFlushInterval:   f.fsmFlushInterval,
		LogStore:           f.logStore,
		RequestIDRetention: f.retention,
		ApplyTimeout:       f.applyTimeout,
		SnapshotThreshold:  f.snapshotThreshold,
		SnapshotInterval:   f.snapshotInterval,
		TrailingLogs:       f.trailingLogs,
		LogLevel:           f.logLevel,
		LogOutput:          logger.Writer(),
	}, f.join == "")
	if err != nil {
		ln.Close()
		return err
	}
	if node.Recovered() {
		logger.Printf("previous stop was unclean: rebuilding state from the latest snapshot and the Raft log")
	}

	srv := api.New(node, apiCfg)
	handler := srv.Handler()
	if f.pprof {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.Handle("/", handler)
		handler = mux
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	serveErr := make(chan error, 1)
	go func() {
		if f.tlsCert != "" {
			serveErr <- hs.ServeTLS(ln, f.tlsCert, f.tlsKey)
		} else {
			serveErr <- hs.Serve(ln)
		}
	}()
	logger.Printf("node %s serving HTTP on %s, Raft on %s, data in %s", node.ID(), f.httpAddr, f.raftAddr, f.dataDir)

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	background := make(chan error, 2)
	if f.join != "" {
		go func() {
			if err := node.JoinCluster(ctx, f.join); err != nil && ctx.Err() == nil {
				background <- err
				return
			}
			logger.Printf("joined the cluster through %s", f.join)
		}()
	}
	if len(policies) > 0 {
		go func() {
			if err := loadPolicies(ctx, node, policies); err != nil && ctx.Err() == nil {
				background <- err
			}
		}()
	}

	var runErr error
	select {
	case <-ctx.Done():
		logger.Printf("shutting down")
	case err := <-serveErr:
		runErr = fmt.Errorf("http server: %w", err)
	case err := <-background:
		runErr = err
	}
	shutdownCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	hs.Shutdown(shutdownCtx)
	if err := node.Close(); err != nil {
		return errors.Join(runErr, err)
	}
	return runErr
}

// loadPolicies writes the --policies file through the leader, skipping
// policies that are already stored as given; it retries until a leader exists.
func loadPolicies(ctx context.Context, node *cluster.Node, policies []fsm.Policy) error {
	for _, p := range policies {
		if cur, ok := node.Policy(p.Name); ok && cur == p {
			continue
		}
		for {
			resp, err := node.Apply(ctx, fsm.EncodePutPolicy(p))
			if err == nil {
				if e, ok := resp.(error); ok && e != nil {
					return fmt.Errorf("policy %s: %w", p.Name, e)
				}
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

func forwardingClient(f *serveFlags) (string, *http.Client, error) {
	if f.tlsCert == "" {
		return "http", nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return "", nil, fmt.Errorf("read --tls-ca %s: %w", f.tlsCA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return "", nil, fmt.Errorf("--tls-ca %s: no certificates found", f.tlsCA)
		}
		tc.RootCAs = pool
	}
	tr := &http.Transport{
		TLSClientConfig:     tc,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return "https", &http.Client{Transport: tr}, nil
}
