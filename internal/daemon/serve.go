package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/buildinfo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/overlimit"
	"github.com/limitd/limitd/persist"
	"github.com/limitd/limitd/service"
)

// HTTP server limits (flags --read-timeout, --idle-timeout, --max-connections).
// The write deadline is the request deadline (--apply-timeout) plus
// writeTimeoutMargin, so an answer is always written in time.
const (
	DefaultReadTimeout    = 10 * time.Second
	DefaultIdleTimeout    = 120 * time.Second
	DefaultMaxConnections = 4096
	writeTimeoutMargin    = 5 * time.Second
	// DefaultShutdownTimeout bounds a SIGTERM shutdown (--shutdown-timeout).
	DefaultShutdownTimeout = 10 * time.Second
)

// Defaults of the serve flags this command owns; the cluster, api and
// service settings take theirs from those packages' Default* constants.
const (
	DefaultHTTPAddr       = "127.0.0.1:8080"
	DefaultRaftAddr       = "127.0.0.1:8300"
	DefaultDataDir        = "./limitd-data"
	DefaultGCPercent      = 400
	DefaultMemoryLimitMiB = 512
	DefaultLogLevel       = "info"
	DefaultLogFormat      = "text"
)

type serveFlags struct {
	nodeID, httpAddr, raftAddr, dataDir, conf string
	httpAdvertise, raftAdvertise              string
	adminToken, tlsCert, tlsKey, tlsCA        string
	policies, authKeySource, logLevel         string
	authURIHeader, authAddrHeader             string
	logStore                                  string
	batchMaxOps, batchInflight, maxBatch      int
	fsmCommitEvery                            int
	fsmCacheKeys                              int
	overLimitEntries                          int
	batchMaxWait, retention, applyTimeout     time.Duration
	snapshotInterval, fsmFlushInterval        time.Duration
	snapshotThreshold, trailingLogs           uint64
	pprof, insecure, stayAfterRemoval         bool
	readTimeout, idleTimeout                  time.Duration
	// Raft timing and shutdown: failover speed and a bounded SIGTERM.
	raftHeartbeat, raftElection, raftLease time.Duration
	raftNoPipeline                         bool
	diskStallTransfer, diskStallWindow     time.Duration // cluster/diskwatch.go
	diskStallFail                          time.Duration
	noApplyAhead                           bool
	shutdownTimeout                        time.Duration
	maxConnections                         int
	gcPercent                              int
	memoryLimit                            int64
	grpc                                   grpcFlags   // grpc.go
	bounds                                 boundsFlags // bounds.go
	watch                                  watchFlags  // watch.go
	groups                                 groupsFlags // groups.go

	join            joinList // --join, with --bootstrap-expect and --join-timeout
	bootstrapExpect int
	joinTimeout     time.Duration
	logFormat       string
}

// FlagSet is the serve flag set, its usage text written to out: for help
// (`limitd help serve`) and for checks of deploy files against the flags.
func FlagSet(out io.Writer) *flag.FlagSet {
	fs, _ := newServeFlagSet(out)
	return fs
}

func newServeFlagSet(out io.Writer) (*flag.FlagSet, *serveFlags) {
	f := &serveFlags{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.nodeID, "node-id", "", "unique Raft server ID of this node (default: the --raft-addr)")
	fs.StringVar(&f.conf, "config", "", "YAML file of flag settings (keys are flag names, e.g. http-addr: 127.0.0.1:8080); flags and LIMITD_* variables override it")
	fs.StringVar(&f.httpAddr, "http-addr", DefaultHTTPAddr, "address the HTTP API listens on")
	fs.StringVar(&f.raftAddr, "raft-addr", DefaultRaftAddr, "address the Raft transport listens on")
	fs.StringVar(&f.httpAdvertise, "http-advertise", "", "HTTP address other nodes use to reach this one (default: --http-addr)")
	fs.StringVar(&f.raftAdvertise, "raft-advertise", "", "Raft address other nodes use to reach this one (default: --raft-addr)")
	fs.StringVar(&f.dataDir, "data-dir", DefaultDataDir, "directory for the Raft log, snapshots and the state database")
	fs.Var(&f.join, "join", "HTTP addresses of cluster members to join, comma-separated or repeated (e.g. http://10.0.0.1:8080); a host name resolving to several addresses (a Kubernetes headless service) means each of them. A node with --join never bootstraps alone; without it a fresh node bootstraps a single-node cluster")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0, "with --join: wait until this many nodes from the --join list (this one included) see each other, then the one with the lowest --node-id bootstraps the cluster with all of them as voters (0: join an existing cluster only)")
	fs.DurationVar(&f.joinTimeout, "join-timeout", cluster.DefaultJoinTimeout, "how long a fresh node retries --join (with capped exponential backoff) before it exits with an error")
	fs.StringVar(&f.adminToken, "admin-token", "", "bearer token required by admin endpoints (policies, key reset, membership) and node-to-node requests")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "this node's certificate file: serve HTTPS (with --tls-key); with --tls-ca also the node's identity for Raft and forwarding")
	fs.StringVar(&f.tlsKey, "tls-key", "", "private key file for --tls-cert")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "cluster CA bundle: turns on mutual TLS between nodes (Raft and forwarding require a certificate it signed); without it Raft is plain TCP and forwarding verifies the leader against the system roots")
	fs.BoolVar(&f.insecure, "insecure", false, "allow a non-loopback --http-addr, --raft-addr or --grpc-addr without --admin-token and mutual TLS (--tls-cert, --tls-key, --tls-ca): anyone who can reach the ports could then change policies, membership and decisions")
	fs.StringVar(&f.policies, "policies", "", "JSON file of policies to create or update at start, and again when it changes (--config-watch-interval)")
	fs.StringVar(&f.authKeySource, "auth-key-source", api.DefaultAuthKeySource, "where /v1/auth/{policy} takes the key from: header:NAME, query:NAME or ip")
	fs.StringVar(&f.authURIHeader, "auth-uri-header", api.DefaultAuthURIHeader, "the only header /v1/auth/{policy} reads the original request URI from (for query:NAME key sources); the nginx and HAProxy snippets of docs/API.md set X-Original-URI, Traefik sets X-Forwarded-Uri")
	fs.StringVar(&f.authAddrHeader, "auth-addr-header", api.DefaultAuthAddrHeader, "the only header /v1/auth/{policy} reads the client address from (key source ip); the proxy must overwrite it")
	fs.IntVar(&f.maxBatch, "max-batch", service.DefaultMaxBatch, "maximum checks in one /v1/check/batch or /v1/check/all request")
	fs.IntVar(&f.batchMaxOps, "batch-max-ops", cluster.DefaultBatchMaxOps, "group commit: maximum ops in one Raft log entry")
	fs.IntVar(&f.batchInflight, "batch-inflight", cluster.DefaultBatchInflight, "group commit: log entries in flight at once; more arrivals wait and form the next entry")
	fs.DurationVar(&f.batchMaxWait, "batch-max-wait", 0, "group commit: how long a batch that is not full may wait for more ops (0: natural batching only)")
	fs.IntVar(&f.fsmCommitEvery, "fsm-commit-every", cluster.DefaultFSMCommitEvery, "state database: applied log batches that share one bbolt commit (1: commit each)")
	fs.IntVar(&f.overLimitEntries, "overlimit-cache-entries", overlimit.DefaultMaxEntries, "over-limit cache: refusals every node answers from memory, without a Raft round (about 120 bytes each plus key); 0 turns it off")
	fs.IntVar(&f.fsmCacheKeys, "fsm-cache-keys", persist.DefaultCacheKeys, "state machine: keys whose decoded state stays in memory after a commit (about 120 bytes each); the keys written since the last commit come on top")
	fs.DurationVar(&f.fsmFlushInterval, "fsm-flush-interval", cluster.DefaultFSMFlushInterval, "state database: commit pending applies at least this often")
	fs.StringVar(&f.logStore, "log-store", "", "Raft log store: wal (hashicorp/raft-wal, one fsync per append; the default for a new data directory) or boltdb (hashicorp/raft-boltdb, two); empty: whichever the data directory already uses")
	fs.DurationVar(&f.retention, "request-id-retention", cluster.DefaultRequestIDRetention, "how long a request_id's decision is remembered for safe retries (at most 168h)")
	fs.DurationVar(&f.applyTimeout, "apply-timeout", cluster.DefaultApplyTimeout, "the request deadline: every check or admin call answers within it (503 unavailable or outcome_unknown when the cluster could not decide in time)")
	fs.Uint64Var(&f.snapshotThreshold, "snapshot-threshold", cluster.DefaultSnapshotThreshold, "take a Raft snapshot once this many log entries follow the last one (checked every --snapshot-interval)")
	fs.DurationVar(&f.snapshotInterval, "snapshot-interval", cluster.DefaultSnapshotInterval, "how often to check whether a snapshot is due")
	fs.DurationVar(&f.raftHeartbeat, "raft-heartbeat-timeout", cluster.DefaultHeartbeatTimeout, "Raft: a follower that has not heard from the leader for this long starts an election (and its checks answer 503 once an election timeout more has passed without a leader)")
	fs.DurationVar(&f.raftElection, "raft-election-timeout", cluster.DefaultElectionTimeout, "Raft: how long a candidate waits for votes before trying again")
	fs.DurationVar(&f.raftLease, "raft-lease-timeout", cluster.DefaultLeaderLeaseTimeout, "Raft: a leader that cannot reach a quorum for this long steps down (at most --raft-heartbeat-timeout)")
	fs.DurationVar(&f.diskStallTransfer, "disk-stall-transfer", cluster.DefaultDiskStallTransfer, "a leader whose Raft log writes' p99 stays above this for a --disk-stall-window hands leadership to another voter (0: never)")
	fs.DurationVar(&f.diskStallWindow, "disk-stall-window", cluster.DefaultDiskStallWindow, "the sliding window the Raft log writes' p99 is measured over (--disk-stall-transfer, --disk-stall-fail)")
	fs.DurationVar(&f.diskStallFail, "disk-stall-fail", cluster.DefaultDiskStallFail, "a node whose Raft log writes' p99 stays above --disk-stall-transfer this long stops serving, as for a failed write (0: never)")
	fs.BoolVar(&f.raftNoPipeline, "raft-no-pipeline", false, "Raft: send one AppendEntries at a time to each follower instead of pipelining them")
	fs.BoolVar(&f.noApplyAhead, "no-apply-ahead", false, "a follower waits for the leader's answer to every check it forwards instead of answering from its own log once the entry is committed (clusters of up to three voters)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", DefaultShutdownTimeout, "bound on a SIGTERM/SIGINT shutdown: HTTP draining and Raft's shutdown share it; past it the process exits anyway (its state is crash-safe)")
	fs.Uint64Var(&f.trailingLogs, "trailing-logs", cluster.DefaultTrailingLogs, "log entries kept after a snapshot, so a lagging follower can catch up without one")
	fs.StringVar(&f.logLevel, "log-level", DefaultLogLevel, "log level of the whole process, Raft included: debug, info, warn, error")
	fs.StringVar(&f.logFormat, "log-format", DefaultLogFormat, "log format: text (key=value) or json (one object a line)")
	fs.IntVar(&f.gcPercent, "gc-percent", DefaultGCPercent, "Go garbage collector target percent, like GOGC (which wins when set; 0 keeps Go's default of 100): the live heap is small, so a higher target trades some memory for CPU")
	fs.Int64Var(&f.memoryLimit, "memory-limit-mib", DefaultMemoryLimitMiB, "soft limit of the Go heap in MiB, like GOMEMLIMIT (which wins when set; 0: none): with --gc-percent above 100 the heap grows less eagerly once it is this large")
	fs.DurationVar(&f.readTimeout, "read-timeout", DefaultReadTimeout, "HTTP: time to read a request's headers and body; a slower client is disconnected")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", DefaultIdleTimeout, "HTTP: how long an idle keep-alive connection stays open")
	fs.IntVar(&f.maxConnections, "max-connections", DefaultMaxConnections, "HTTP: connections served at once; more wait in the listen backlog until one closes")
	fs.BoolVar(&f.stayAfterRemoval, "stay-after-removal", false, "keep running (not ready, answering 503) after this node is removed from the cluster, instead of exiting")
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go profiling endpoints under /debug/pprof/")
	addGRPCFlags(fs, &f.grpc)
	addBoundsFlags(fs, &f.bounds)
	addWatchFlags(fs, &f.watch)
	addGroupsFlags(fs, &f.groups)
	fs.Usage = func() {
		fmt.Fprint(out, serveUsage)
		fs.PrintDefaults()
	}
	return fs, f
}

// Main runs `limitd serve` with args (the flags after the command name) until
// SIGINT or SIGTERM and returns the exit status: 0 after a clean shutdown (or
// -h), 2 for a bad flag, environment variable, config file or start-up input
// (refused before anything is written), 1 when the node fails once started.
// Logs, errors and the usage of a bad flag go to stderr.
func Main(args []string, stderr io.Writer) int {
	f, err := loadServeFlags(args, os.LookupEnv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "limitd:", err)
		return 2
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		fmt.Fprintln(stderr, "limitd: --tls-cert and --tls-key go together")
		return 2
	}
	if f.tlsCA != "" && f.tlsCert == "" {
		fmt.Fprintln(stderr, "limitd: --tls-ca needs --tls-cert and --tls-key (the node's own certificate, signed by that CA)")
		return 2
	}
	if f.retention <= 0 || f.retention > cluster.MaxRequestIDRetention {
		fmt.Fprintf(stderr, "limitd: --request-id-retention %v: must be positive and at most %v\n", f.retention, cluster.MaxRequestIDRetention)
		return 2
	}
	if f.readTimeout <= 0 || f.idleTimeout <= 0 || f.maxConnections <= 0 {
		fmt.Fprintln(stderr, "limitd: --read-timeout, --idle-timeout and --max-connections must be positive")
		return 2
	}
	if err := f.bounds.validate(); err != nil {
		fmt.Fprintln(stderr, "limitd:", err)
		return 2
	}
	if err := checkSecureDefaults(f); err != nil {
		fmt.Fprintln(stderr, "limitd:", err)
		return 2
	}
	if f.bootstrapExpect < 0 || f.bootstrapExpect == 1 || (f.bootstrapExpect > 1 && len(f.join) == 0) {
		// A node with --join never bootstraps alone; one without it does.
		fmt.Fprintln(stderr, "limitd: --bootstrap-expect N (N of at least 2) needs --join with the addresses of the nodes that bootstrap together; a single node bootstraps without --join")
		return 2
	}
	if f.raftHeartbeat <= 0 || f.raftElection <= 0 || f.raftLease <= 0 || f.raftLease > f.raftHeartbeat {
		fmt.Fprintln(stderr, "limitd: --raft-heartbeat-timeout, --raft-election-timeout and --raft-lease-timeout must be positive, the lease at most the heartbeat timeout")
		return 2
	}
	if f.diskStallTransfer < 0 || f.diskStallWindow <= 0 || f.diskStallFail < 0 || (f.diskStallFail > 0 && f.diskStallFail < f.diskStallWindow) {
		fmt.Fprintln(stderr, "limitd: --disk-stall-window must be positive, --disk-stall-transfer and --disk-stall-fail not negative, and --disk-stall-fail (when set) at least the window")
		return 2
	}
	if f.shutdownTimeout < 100*time.Millisecond {
		fmt.Fprintln(stderr, "limitd: --shutdown-timeout must be at least 100ms")
		return 2
	}
	if f.joinTimeout < 0 {
		fmt.Fprintln(stderr, "limitd: --join-timeout must not be negative (0: retry until stopped)")
		return 2
	}
	logger, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "limitd:", err)
		return 2
	}
	in, err := loadStartInputs(f) // startup.go: before anything is written to disk
	if err != nil {
		fmt.Fprintln(stderr, "limitd:", err)
		return 2
	}
	if err := serve(f, in, logger); err != nil {
		logger.Error("exiting", "error", err)
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

func serve(f *serveFlags, in *startInputs, logger *slog.Logger) error {
	v := buildinfo.Current()
	logger.Info("starting limitd", "version", v.Version, "revision", v.Revision, "modified", v.Modified, "go", v.Go)
	for _, w := range startWarnings(f) { // startup.go
		logger.Warn(w)
	}
	tuneGC(f.gcPercent, f.memoryLimit, os.Getenv)
	apiCfg := api.Config{
		AdminToken:    f.adminToken,
		AuthKeySource: f.authKeySource,
		AuthURIHeader: f.authURIHeader, AuthAddrHeader: f.authAddrHeader,
		Logger: logger.With("component", "api"),
	}
	apiCfg.AllowedHosts = f.bounds.hosts(f.httpAddr, f.httpAdvertise)
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
	nodeTLS, err := clusterTLS(f)
	if err != nil {
		return err
	}
	scheme, client, err := forwardingClient(f, nodeTLS)
	if err != nil {
		return err
	}
	if err := checkTracing(); err != nil { // tracing.go: before anything is written
		return err
	}
	// Noted before anything touches it, so that a failed start leaves a
	// directory that was absent or empty as it was.
	dataDir := noteDataDir(f.dataDir)                         // startup.go: undone if the start fails
	if err := privateDataDir(f.dataDir, logger); err != nil { // datadir.go: 0700/0600 before anything is written
		return err
	}
	disk := f.bounds.startDiskGuard(f.dataDir, logger) // bounds.go
	defer disk.Close()
	// Listen before Raft starts so a bad --http-addr fails fast, and so the
	// node can answer forwarded requests as soon as it is a member.
	ln, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		return fmt.Errorf("listen http %s: %w", f.httpAddr, err)
	}
	if err := checkListenPorts(f); err != nil { // startup.go: Raft and gRPC
		ln.Close()
		dataDir.undo(logger)
		return err
	}
	clockOffset, err := faultClockOffset(os.Getenv) // fault.go
	if err != nil {
		ln.Close()
		dataDir.undo(logger)
		return err
	}
	if clockOffset != 0 {
		logger.Warn("fault injection: this node's clock is offset", "offset", clockOffset.String(), "env", FaultClockOffsetEnv)
	}
	node, host, err := openNode(f, cluster.Config{ // groups.go: one group, or the Host of several
		FaultClockOffset:   clockOffset,
		DiskStallTransfer:  f.diskStallTransfer,
		DiskStallWindow:    f.diskStallWindow,
		DiskStallFail:      f.diskStallFail,
		NodeID:             f.nodeID,
		RaftAddr:           raftAdv,
		RaftBind:           f.raftAddr,
		HTTPAddr:           httpAdv,
		DataDir:            f.dataDir,
		HTTPScheme:         scheme,
		HTTPClient:         client,
		AdminToken:         f.adminToken,
		TLS:                nodeTLS,
		BatchMaxOps:        f.batchMaxOps,
		BatchInflight:      f.batchInflight,
		BatchMaxWait:       f.batchMaxWait,
		FSMCommitEvery:     f.fsmCommitEvery,
		FSMCacheKeys:       f.fsmCacheKeys,
		OverLimitEntries:   f.overLimitEntries,
		FSMFlushInterval:   f.fsmFlushInterval,
		LogStore:           f.logStore,
		RequestIDRetention: f.retention,
		CheckBounds:        f.bounds.checkBounds(disk),
		ApplyTimeout:       f.applyTimeout,
		SnapshotThreshold:  f.snapshotThreshold,
		SnapshotInterval:   f.snapshotInterval,
		TrailingLogs:       f.trailingLogs,
		HeartbeatTimeout:   f.raftHeartbeat,
		ElectionTimeout:    f.raftElection,
		LeaderLeaseTimeout: f.raftLease,
		NoPipeline:         f.raftNoPipeline,
		NoApplyAhead:       f.noApplyAhead,
		ShutdownTimeout:    f.shutdownTimeout / 4,
		Logger:             logger,
	}, len(f.join) == 0, logger)
	if err != nil {
		ln.Close()
		dataDir.undo(logger)
		return err
	}
	stopTracing, err := startTracing(node.ID(), logger) // tracing.go: before the front ends, which read tracing.Enabled
	if err != nil {
		ln.Close()
		return errors.Join(err, closeNode(node, host))
	}
	defer stopTracing() // after node.Close: the last commits' spans are flushed too
	if node.Recovered() {
		logger.Warn("previous stop was unclean: rebuilding state from the latest snapshot and the Raft log")
	}
	disk.onLow(lowDiskRaft(node.Backups().Raft, logger)) // bounds.go: compact the log while the disk is short

	fe, err := newFrontEnds(f, in, node, host, apiCfg, logger) // HTTP and gRPC on one service (frontends.go)
	if err != nil {
		ln.Close()
		return errors.Join(err, closeNode(node, host))
	}
	rlsFE, handler := fe.rls, fe.handler
	if tracing.Enabled() {
		handler = tracing.HTTP(handler) // spans for the check routes only
	}
	if f.pprof {
		handler = withPprof(handler)
	}
	hs := newHTTPServer(f, handler)
	// net/http's own reports (a client's TLS handshake failing, say) are
	// about clients, not this node: Info.
	hs.ErrorLog = slog.NewLogLogger(logger.With("component", "http").Handler(), slog.LevelInfo)
	ln = limitListener(ln, f.maxConnections)
	if nodeTLS != nil {
		// Clients of the public API need no certificate; one that is given
		// must verify, and the internal endpoints require one.
		hs.TLSConfig = nodeTLS.Clone()
		hs.TLSConfig.ClientAuth = tls.VerifyClientCertIfGiven
	}
	serveErr := make(chan error, 1)
	go func() {
		if f.tlsCert != "" {
			serveErr <- hs.ServeTLS(ln, f.tlsCert, f.tlsKey)
		} else {
			serveErr <- hs.Serve(ln)
		}
	}()
	logger.Info("serving", "node_id", node.ID(), "http_addr", f.httpAddr, "raft_addr", f.raftAddr, "data_dir", f.dataDir)

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	background := make(chan error, 4)
	rlsFE.start(ctx, background)
	if len(f.join) > 0 {
		go func() {
			err := node.JoinCluster(ctx, cluster.JoinOptions{
				Addrs: f.join, BootstrapExpect: f.bootstrapExpect, Timeout: f.joinTimeout})
			if err != nil && ctx.Err() == nil {
				background <- err
			}
		}()
	}
	startConfigSync(ctx, f, fe.svc, fe.config, logger, background) // --policies, --rls-config (watch.go)
	go fe.alerts.Run(ctx)                                          // webhook deliveries while this node leads
	hs.RegisterOnShutdown(fe.svc.CloseEventStreams)                // GET /v1/events streams end, or draining would wait for them

	removed := node.Removed()
	if f.stayAfterRemoval {
		removed = nil
	}
	var runErr error
	stopReason := "" // for the final line of a clean stop
	select {
	case <-ctx.Done():
		stopReason = stopSignal(ctx) // startup.go
		logger.Info("shutting down", "signal", stopReason)
	case <-removed:
		stopReason = "removed from the cluster"
		// Exit 0: a supervisor restarting on failure should not bring back
		// a node an operator removed.
		logger.Info("this node was removed from the cluster: shutting down (--stay-after-removal keeps it running, not ready)")
	case <-hostFailed(host): // groups.go: a --data-groups mismatch, a data group that failed to open
		runErr = fmt.Errorf("fatal: %v; exiting", host.Err())
	case <-node.Failed():
		// Stop, rather than limp on: the node does not recover by itself
		// (docs/SECURITY.md); a supervisor restarts it once space is freed.
		runErr = fmt.Errorf("fatal: %v; exiting: restart the node once the cause is fixed", node.Health())
	case err := <-serveErr:
		runErr = fmt.Errorf("http server: %w", err)
	case err := <-background:
		runErr = err
	}
	// The whole shutdown is bounded (no hung SIGTERM): HTTP draining gets half of
	// --shutdown-timeout, Raft a quarter before its transport is closed under
	// it and as much again before the stores are closed regardless; the
	// watchdog exits past the bound whatever still hangs.
	watchdog := time.AfterFunc(f.shutdownTimeout, func() {
		logger.Error("shutdown exceeded --shutdown-timeout: exiting now; the data directory is crash-safe", "shutdown_timeout", f.shutdownTimeout)
		os.Exit(1)
	})
	defer watchdog.Stop()
	shutdownCtx, stop := context.WithTimeout(context.Background(), f.shutdownTimeout/2)
	defer stop()
	hs.Shutdown(shutdownCtx)
	rlsFE.stop(shutdownCtx)
	fe.svc.CloseLeases(shutdownCtx) // give unspent quota leases back while the node can still propose
	if err := closeNode(node, host); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr == nil {
		// The last line of a node that stopped as asked: without it a clean
		// stop and a kill -9 after "shutting down" read the same.
		logger.Info("stopped cleanly", "reason", stopReason, "applied_index", node.AppliedIndex())
	}
	return runErr
}

// newHTTPServer applies the HTTP limits: a client has --read-timeout to send
// its headers and body (a slow body is cut off, not held), the answer must be
// written within the request deadline plus a margin, idle keep-alive
// connections close after --idle-timeout.
func newHTTPServer(f *serveFlags, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           closeAfterChunkedBody(h),
		ReadHeaderTimeout: f.readTimeout,
		ReadTimeout:       f.readTimeout,
		WriteTimeout:      f.applyTimeout + writeTimeoutMargin,
		IdleTimeout:       f.idleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
}

// closeAfterChunkedBody closes the connection after answering a request
// with a Transfer-Encoding: RFC 9112 (6.3) requires it when the request
// also had a Content-Length (a sign of request smuggling), and net/http
// drops that Content-Length before a handler could tell the two apart. A
// client sending chunked bodies reconnects; API clients send lengths.
func closeAfterChunkedBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// withPprof serves Go's profiling endpoints under /debug/pprof and
// everything else with h. The prefix is tested here, rather than h put
// under an http.ServeMux's "/": the mux would redirect paths it deems
// unclean ("/v1/keys/a//b", a key) and cost every request its matching,
// which profiles would then show (3% of a node's CPU).
func withPprof(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", noWriteDeadline(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", noWriteDeadline(pprof.Trace))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/debug/pprof/") || r.URL.Path == "/debug/pprof" { // the mux redirects the latter to the index
			mux.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// noWriteDeadline lifts the server's write deadline for a handler that
// streams for longer on purpose (CPU profiles and traces).
func noWriteDeadline(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).SetWriteDeadline(time.Time{})
		h(w, r)
	}
}

// limitListener accepts at most n connections at a time: Accept waits for a
// served connection to close, and further clients wait in the kernel's
// listen backlog, so a flood of slow clients cannot exhaust memory or file
// descriptors.
func limitListener(ln net.Listener, n int) net.Listener {
	return &limitedListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

type limitedListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitedListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitedListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// clusterTLS is the node-to-node mutual TLS configuration (nil without --tls-ca).
func clusterTLS(f *serveFlags) (*tls.Config, error) {
	if f.tlsCA == "" {
		return nil, nil
	}
	tc, err := cluster.LoadTLS(f.tlsCert, f.tlsKey, f.tlsCA)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w", err)
	}
	return tc, nil
}

// forwardingClient is the HTTP client for forwarding and joining: plain HTTP
// without TLS; with --tls-ca it presents the node certificate and trusts only
// the cluster CA; with only --tls-cert it verifies against the system roots.
func forwardingClient(f *serveFlags, nodeTLS *tls.Config) (string, *http.Client, error) {
	if f.tlsCert == "" {
		return "http", nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if nodeTLS != nil {
		tc = nodeTLS.Clone()
	}
	tr := &http.Transport{
		TLSClientConfig:     tc,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return "https", &http.Client{Transport: tr}, nil
}

// listenerAddr is one address flag of a listener (or the address others
// reach it at).
type listenerAddr struct{ flag, addr string }

// listeners is every address this node listens on or advertises, by flag
// name: the one list checkSecureDefaults guards. A new listener's flags go
// here; TestSecureDefaultsCoverEveryListener fails for any *-addr or
// *-advertise flag missing from it.
func (f *serveFlags) listeners() []listenerAddr {
	return []listenerAddr{
		{"http-addr", f.httpAddr}, {"raft-addr", f.raftAddr}, {"grpc-addr", f.grpc.addr},
		{"http-advertise", f.httpAdvertise}, {"raft-advertise", f.raftAdvertise},
	}
}

// checkSecureDefaults refuses a node reachable beyond loopback without
// credentials, unless --insecure: the admin token guards policy, key and
// membership changes on the HTTP and gRPC ports, and only mutual TLS keeps
// strangers from sending Raft RPCs (which can rewrite the log) or forwarded
// checks, and keeps the token off the network in plain text.
func checkSecureDefaults(f *serveFlags) error {
	if f.insecure {
		return nil
	}
	var exposed []string
	for _, a := range f.listeners() {
		if a.addr != "" && !isLoopback(a.addr) {
			exposed = append(exposed, "--"+a.flag+" "+a.addr)
		}
	}
	if len(exposed) == 0 {
		return nil
	}
	var missing []string
	if f.adminToken == "" {
		missing = append(missing, "--admin-token (without it anyone who reaches the HTTP or gRPC port can change policies, reset keys and add or remove voters)")
	}
	if f.tlsCA == "" {
		missing = append(missing, "--tls-cert, --tls-key and --tls-ca (without mutual TLS anyone who reaches the Raft port can forge Raft RPCs that rewrite the log)")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("refusing to start: %s %s not a loopback address, and this node has no %s; set them (docs/SECURITY.md, scripts/certs.sh), or pass --insecure to run unprotected on a network you trust",
		strings.Join(exposed, ", "), map[bool]string{true: "is", false: "are"}[len(exposed) == 1], strings.Join(missing, ", nor "))
}

// isLoopback reports whether addr (host:port) binds or points only to the
// loopback interface. An empty host (":8080") means every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
