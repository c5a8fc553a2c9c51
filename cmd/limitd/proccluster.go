package main

// The process-level harness: limitd nodes as real processes on loopback. A
// procNode is one `limitd serve`; a procCluster is N of them (the first
// bootstraps, the others join it). `limitd bench --cluster N` runs its
// cluster with it, and the process, crash and bench tests drive theirs with
// it, so starting, readiness, stopping and log collection live in one place.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procServe returns the command that runs a node: this executable's "serve".
// Tests point it at the test binary (a fake or an in-binary real node).
var procServe = func() (string, []string, error) {
	exe, err := os.Executable()
	return exe, []string{"serve"}, err
}

// procNode is one limitd process. Its log (stdout and stderr) goes to
// logPath, truncated at each start.
type procNode struct {
	id, httpAddr, raftAddr, dataDir, logPath string
	join                                     string   // --join address, "" to bootstrap
	grpcAddr                                 string   // --grpc-addr, "" for none
	exe                                      string   // the executable
	prefix                                   []string // arguments before the flags ("serve")
	procs                                    int      // GOMAXPROCS of the process, 0: Go's default

	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has been reaped
	waitErr error         // the exit error, once exited is closed
}

// procEnvDropped are variables a node must not inherit: the harness sets
// identity and addresses itself, and a LIMITD_JOIN would make node 1 join
// some other cluster.
var procEnvDropped = []string{
	"LIMITD_NODE_ID=", "LIMITD_HTTP_ADDR=", "LIMITD_RAFT_ADDR=", "LIMITD_HTTP_ADVERTISE=",
	"LIMITD_RAFT_ADVERTISE=", "LIMITD_DATA_DIR=", "LIMITD_JOIN=",
	"LIMITD_CONFIG=", "LIMITD_BOOTSTRAP_EXPECT=", // a file's join list would do the same
}

// procTLSEnvDropped are dropped too unless procTLSFromEnv: certificates meant
// for another cluster would make a bench node refuse to start.
var procTLSEnvDropped = []string{"LIMITD_TLS_CERT=", "LIMITD_TLS_KEY=", "LIMITD_TLS_CA="}

// procTLSFromEnv makes nodes inherit LIMITD_TLS_* and be reached over HTTPS
// (set by the tests when scripts/chaos.sh runs them with mutual TLS on).
var procTLSFromEnv = false

// procScheme is the scheme of the nodes' HTTP addresses.
func procScheme() string {
	if procTLSFromEnv {
		return "https"
	}
	return "http"
}

// start runs the node with its identity flags and extra. The process is
// reaped by a goroutine; running, wait, kill and term observe it.
func (nd *procNode) start(extra ...string) error {
	if nd.running() {
		return fmt.Errorf("start %s: already running", nd.id)
	}
	args := append([]string(nil), nd.prefix...)
	args = append(args, "--node-id", nd.id, "--http-addr", nd.httpAddr, "--raft-addr", nd.raftAddr, "--data-dir", nd.dataDir)
	if nd.join != "" {
		args = append(args, "--join", nd.join)
	}
	if nd.grpcAddr != "" {
		args = append(args, "--grpc-addr", nd.grpcAddr)
	}
	args = append(args, extra...)
	logf, err := os.Create(nd.logPath)
	if err != nil {
		return fmt.Errorf("create log of %s: %w", nd.id, err)
	}
	cmd := exec.Command(nd.exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	for _, kv := range os.Environ() {
		drop := false
		for _, p := range procEnvDropped {
			drop = drop || strings.HasPrefix(kv, p)
		}
		for _, p := range procTLSEnvDropped {
			drop = drop || (!procTLSFromEnv && strings.HasPrefix(kv, p))
		}
		if !drop {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if nd.procs > 0 { // os/exec keeps the last of duplicate variables
		cmd.Env = append(cmd.Env, fmt.Sprintf("GOMAXPROCS=%d", nd.procs))
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", nd.id, err)
	}
	exited := make(chan struct{})
	nd.cmd, nd.exited = cmd, exited
	go func() {
		err := cmd.Wait()
		logf.Close()
		nd.waitErr = err // written before close: readers wait on exited
		close(exited)
	}()
	return nil
}

// running reports whether the process started last is still running.
func (nd *procNode) running() bool {
	if nd.cmd == nil {
		return false
	}
	select {
	case <-nd.exited:
		return false
	default:
		return true
	}
}

// pid is the process id of the last start (0 if never started).
func (nd *procNode) pid() int {
	if nd.cmd == nil {
		return 0
	}
	return nd.cmd.Process.Pid
}

// wait blocks until the process exits and returns its exit error.
func (nd *procNode) wait() error {
	if nd.cmd == nil {
		return errors.New(nd.id + " was never started")
	}
	<-nd.exited
	return nd.waitErr
}

// waitTimeout is wait with a limit: exited is false (and err nil) if the
// process is still running after d.
func (nd *procNode) waitTimeout(d time.Duration) (exited bool, err error) {
	select { // an exit already seen wins over an expired timer
	case <-nd.exited:
		return true, nd.waitErr
	default:
	}
	select {
	case <-nd.exited:
		return true, nd.waitErr
	case <-time.After(d):
		return false, nil
	}
}

// kill sends SIGKILL and waits for the process to be reaped.
func (nd *procNode) kill() {
	if nd.running() {
		nd.cmd.Process.Signal(syscall.SIGKILL)
		<-nd.exited
	}
}

// term sends SIGTERM and waits up to timeout for a clean exit; past it the
// process is killed and the error says so.
func (nd *procNode) term(timeout time.Duration) error {
	if !nd.running() {
		return nd.wait()
	}
	nd.cmd.Process.Signal(syscall.SIGTERM)
	if exited, err := nd.waitTimeout(timeout); exited {
		return err
	}
	nd.kill()
	return fmt.Errorf("%s did not stop within %s of SIGTERM", nd.id, timeout)
}

// url is the node's HTTP base address followed by path.
func (nd *procNode) url(path string) string { return procScheme() + "://" + nd.httpAddr + path }

// logs returns the node's log since its last start.
func (nd *procNode) logs() string {
	b, _ := os.ReadFile(nd.logPath)
	return string(b)
}

// logTail returns the last lines of the log.
func (nd *procNode) logTail(lines int) []string {
	f, err := os.Open(nd.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var tail []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		tail = append(tail, sc.Text())
		if len(tail) > lines {
			tail = tail[1:]
		}
	}
	return tail
}

// procCluster is a cluster of limitd processes in one directory.
type procCluster struct {
	dir   string
	nodes []*procNode
}

// Timeouts of a procCluster: start-up (all nodes ready), and SIGTERM to exit.
var (
	procStartTimeout = 60 * time.Second
	procStopTimeout  = 10 * time.Second
)

// startProcCluster starts one node per id in dir (data in dir/<id>, log in
// dir/<id>.log) on free loopback ports and waits until every node is ready
// and the first lists them all. The first bootstraps; the others join it.
// On failure everything started is stopped and the error carries the end of
// the nodes' logs. dir is not removed: stop does that.
func startProcCluster(ctx context.Context, dir string, ids []string, extra []string) (*procCluster, error) {
	return startProcClusterOpts(ctx, dir, ids, procOptions{Extra: extra})
}

// procOptions are the choices of startProcClusterOpts.
type procOptions struct {
	Extra []string // flags after the node's identity flags
	// GRPC: every node also serves gRPC on a free loopback port of its own
	// (procNode.grpcAddr).
	GRPC bool
	// Procs, when > 0, is every node's GOMAXPROCS (an inherited GOMAXPROCS
	// is replaced).
	Procs int
}

// startProcClusterOpts is startProcCluster with options.
func startProcClusterOpts(ctx context.Context, dir string, ids []string, o procOptions) (*procCluster, error) {
	extra := o.Extra
	exe, prefix, err := procServe()
	if err != nil {
		return nil, fmt.Errorf("find the limitd executable: %w", err)
	}
	c := &procCluster{dir: dir}
	ports, err := freeLoopbackAddrs(3 * len(ids))
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		nd := &procNode{
			id: id, httpAddr: ports[2*i], raftAddr: ports[2*i+1],
			dataDir: filepath.Join(dir, id), logPath: filepath.Join(dir, id+".log"),
			exe: exe, prefix: prefix, procs: o.Procs,
		}
		if o.GRPC {
			nd.grpcAddr = ports[2*len(ids)+i]
		}
		if i > 0 {
			nd.join = c.nodes[0].url("")
		}
		c.nodes = append(c.nodes, nd)
	}
	fail := func(err error) (*procCluster, error) {
		err = fmt.Errorf("%w%s", err, c.logTails(20))
		c.stopNodes()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, procStartTimeout)
	defer cancel()
	if err := c.nodes[0].start(extra...); err != nil {
		return fail(err)
	}
	if err := c.waitReady(ctx, c.nodes[:1], 1); err != nil {
		return fail(err)
	}
	for _, nd := range c.nodes[1:] {
		if err := nd.start(extra...); err != nil {
			return fail(err)
		}
	}
	if err := c.waitReady(ctx, c.nodes, len(c.nodes)); err != nil {
		return fail(err)
	}
	return c, nil
}

// freeLoopbackAddrs reserves n distinct free ports by holding them all open
// at once, then releases them for the nodes to bind. The ports are below the
// kernel's ephemeral range when it leaves room (ephemeralPortsFrom): a port
// from that range can be taken by any outgoing connection — another test's
// client — between its release and the node's bind, or while a node
// restarts on it, which failed process tests with "address already in use".
func freeLoopbackAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	lo, hi := minTestPort, ephemeralPortsFrom()
	addrs := make([]string, n)
	for i := range addrs {
		var ln net.Listener
		var err error
		for try := 0; try < 100 && hi-lo > 100; try++ {
			port := lo + rand.IntN(hi-lo)
			if ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				break
			}
		}
		if ln == nil { // no room below the range, or all tries taken
			if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return nil, fmt.Errorf("find a free loopback port: %w", err)
			}
		}
		lns = append(lns, ln)
		addrs[i] = ln.Addr().String()
	}
	return addrs, nil
}

// minTestPort is the lowest port freeLoopbackAddrs picks (above the
// well-known and most registered services' ports).
const minTestPort = 20000

// ephemeralPortsFrom is the first port of the kernel's ephemeral range
// (Linux's /proc/sys/net/ipv4/ip_local_port_range; 32768 where unreadable).
func ephemeralPortsFrom() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

func (c *procCluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = nd.url("")
	}
	return out
}

// waitReady polls until every node in nodes answers /readyz and the first
// node's /v1/cluster lists members members.
func (c *procCluster) waitReady(ctx context.Context, nodes []*procNode, members int) error {
	var last error
	for {
		last = nil
		for _, nd := range nodes {
			if nd.cmd != nil && !nd.running() {
				return fmt.Errorf("%s exited during start-up (%s)", nd.id, nd.cmd.ProcessState)
			}
			if err := getReady(ctx, nd.url("")); err != nil {
				last = fmt.Errorf("%s: %w", nd.id, err)
				break
			}
		}
		if last == nil {
			n, err := clusterMembers(ctx, nodes[0].url(""))
			if err == nil && n == members {
				return nil
			}
			last = fmt.Errorf("%s lists %d of %d members (%v)", nodes[0].id, n, members, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %w (%v)", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func getReady(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
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

func clusterMembers(ctx context.Context, addr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/v1/cluster", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st struct {
		Members []json.RawMessage `json:"members"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /v1/cluster: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, fmt.Errorf("GET /v1/cluster: %w", err)
	}
	return len(st.Members), nil
}

// stop stops every node (stopNodes) and removes the cluster directory.
func (c *procCluster) stop() error {
	err := c.stopNodes()
	if rerr := os.RemoveAll(c.dir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("remove cluster directory: %w", rerr))
	}
	return err
}

// stopNodes sends SIGTERM to every node and kills those still running
// procStopTimeout later. The error names nodes that had exited before (they
// crashed; their logs are attached) and nodes that had to be killed.
func (c *procCluster) stopNodes() error {
	var crashed []string
	for _, nd := range c.nodes {
		if nd.running() {
			nd.cmd.Process.Signal(syscall.SIGTERM)
		} else if nd.cmd != nil {
			crashed = append(crashed, fmt.Sprintf("%s exited during the run (%s)", nd.id, nd.cmd.ProcessState))
		}
	}
	var tails string
	if len(crashed) > 0 {
		tails = c.logTails(20)
	}
	deadline := time.Now().Add(procStopTimeout)
	var killed []string
	for _, nd := range c.nodes {
		if nd.cmd == nil {
			continue
		}
		if exited, _ := nd.waitTimeout(max(time.Until(deadline), 0)); !exited {
			nd.kill()
			killed = append(killed, nd.id)
		}
	}
	var errs []error
	if len(crashed) > 0 {
		errs = append(errs, fmt.Errorf("%s%s", strings.Join(crashed, "; "), tails))
	}
	if len(killed) > 0 {
		errs = append(errs, fmt.Errorf("killed %s: no exit within %s of SIGTERM", strings.Join(killed, ", "), procStopTimeout))
	}
	return errors.Join(errs...)
}

// footprint returns the largest node's data directory size and resident
// memory (0 where the platform does not tell).
func (c *procCluster) footprint() (disk, rss int64) {
	for _, nd := range c.nodes {
		var size int64
		filepath.WalkDir(nd.dataDir, func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if info, err := d.Info(); err == nil {
					size += info.Size()
				}
			}
			return nil
		})
		disk = max(disk, size)
		if nd.running() {
			rss = max(rss, processRSS(nd.pid()))
		}
	}
	return disk, rss
}

// processRSS reads VmRSS from /proc (Linux); 0 elsewhere.
func processRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb)
			return kb << 10
		}
	}
	return 0
}

// logTails returns the last lines of every node's log, for start-up errors.
func (c *procCluster) logTails(lines int) string {
	var b strings.Builder
	for _, nd := range c.nodes {
		if tail := nd.logTail(lines); len(tail) > 0 {
			fmt.Fprintf(&b, "\n--- %s log (last %d lines) ---\n%s", nd.id, len(tail), strings.Join(tail, "\n"))
		}
	}
	return b.String()
}
