// Package proccluster is the process-level harness: limitd nodes as real
// processes on loopback. A Node is one `limitd serve`; a Cluster is N of
// them (the first bootstraps, the others join it). `limitd bench --cluster
// N` (internal/benchcmd) runs its cluster with it, and e2e's process
// and crash tests and the bench's tests drive theirs with it, so starting,
// readiness, stopping and log collection live in one place.
package proccluster

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
	"sync"
	"syscall"
	"time"
)

// Serve returns the command that runs a node: this executable's "serve".
// Tests point it at the test binary (a fake or an in-binary real node).
var Serve = func() (string, []string, error) {
	exe, err := os.Executable()
	return exe, []string{"serve"}, err
}

// Node is one limitd process. Its log (stdout and stderr) goes to
// LogPath, truncated at each start.
type Node struct {
	ID, HTTPAddr, RaftAddr, DataDir, LogPath string
	Join                                     string   // --join address, "" to bootstrap
	GRPCAddr                                 string   // --grpc-addr, "" for none
	Exe                                      string   // the executable
	Prefix                                   []string // arguments before the flags ("serve")
	Procs                                    int      // GOMAXPROCS of the process, 0: Go's default
	// Env is added to the inherited environment at every Start (a later
	// value wins): fault injection such as LIMITD_FAULT_CLOCK_OFFSET.
	Env []string
	// CPUGroup, when set, holds the process from every Start on: its CPU
	// budget (cgroup.go).
	CPUGroup *CPUGroup

	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has been reaped
	waitErr error         // the exit error, once exited is closed
}

// envDropped are variables a node must not inherit: the harness sets
// identity and addresses itself, and a LIMITD_JOIN would make node 1 join
// some other cluster.
var envDropped = []string{
	"LIMITD_NODE_ID=", "LIMITD_HTTP_ADDR=", "LIMITD_RAFT_ADDR=", "LIMITD_HTTP_ADVERTISE=",
	"LIMITD_RAFT_ADVERTISE=", "LIMITD_DATA_DIR=", "LIMITD_JOIN=",
	"LIMITD_CONFIG=", "LIMITD_BOOTSTRAP_EXPECT=", // a file's join list would do the same
}

// tlsEnvDropped are dropped too unless TLSFromEnv: certificates meant
// for another cluster would make a bench node refuse to start.
var tlsEnvDropped = []string{"LIMITD_TLS_CERT=", "LIMITD_TLS_KEY=", "LIMITD_TLS_CA="}

// TLSFromEnv makes nodes inherit LIMITD_TLS_* and be reached over HTTPS
// (set by the tests when scripts/chaos.sh runs them with mutual TLS on).
var TLSFromEnv = false

// scheme is the scheme of the nodes' HTTP addresses.
func scheme() string {
	if TLSFromEnv {
		return "https"
	}
	return "http"
}

// Start runs the node with its identity flags and extra. The process is
// reaped by a goroutine; Running, Wait, Kill and Term observe it.
func (nd *Node) Start(extra ...string) error {
	if nd.Running() {
		return fmt.Errorf("start %s: already running", nd.ID)
	}
	args := append([]string(nil), nd.Prefix...)
	args = append(args, "--node-id", nd.ID, "--http-addr", nd.HTTPAddr, "--raft-addr", nd.RaftAddr, "--data-dir", nd.DataDir)
	if nd.Join != "" {
		args = append(args, "--join", nd.Join)
	}
	if nd.GRPCAddr != "" {
		args = append(args, "--grpc-addr", nd.GRPCAddr)
	}
	args = append(args, extra...)
	logf, err := os.Create(nd.LogPath)
	if err != nil {
		return fmt.Errorf("create log of %s: %w", nd.ID, err)
	}
	cmd := exec.Command(nd.Exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	for _, kv := range os.Environ() {
		drop := false
		for _, p := range envDropped {
			drop = drop || strings.HasPrefix(kv, p)
		}
		for _, p := range tlsEnvDropped {
			drop = drop || (!TLSFromEnv && strings.HasPrefix(kv, p))
		}
		if !drop {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if nd.Procs > 0 { // os/exec keeps the last of duplicate variables
		cmd.Env = append(cmd.Env, fmt.Sprintf("GOMAXPROCS=%d", nd.Procs))
	}
	cmd.Env = append(cmd.Env, nd.Env...)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", nd.ID, err)
	}
	exited := make(chan struct{})
	nd.cmd, nd.exited = cmd, exited
	if nd.CPUGroup != nil {
		// Moved right after the fork: the few instructions it runs before
		// are noise against a run's seconds.
		if err := nd.CPUGroup.Add(cmd.Process.Pid); err != nil {
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			logf.Close()
			close(exited)
			return fmt.Errorf("start %s: %w", nd.ID, err)
		}
	}
	go func() {
		err := cmd.Wait()
		logf.Close()
		nd.waitErr = err // written before close: readers wait on exited
		close(exited)
	}()
	return nil
}

// Running reports whether the process started last is still running.
func (nd *Node) Running() bool {
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

// PID is the process id of the last start (0 if never started).
func (nd *Node) PID() int {
	if nd.cmd == nil {
		return 0
	}
	return nd.cmd.Process.Pid
}

// Wait blocks until the process exits and returns its exit error.
func (nd *Node) Wait() error {
	if nd.cmd == nil {
		return errors.New(nd.ID + " was never started")
	}
	<-nd.exited
	return nd.waitErr
}

// WaitTimeout is Wait with a limit: exited is false (and err nil) if the
// process is still running after d.
func (nd *Node) WaitTimeout(d time.Duration) (exited bool, err error) {
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

// Kill sends SIGKILL and waits for the process to be reaped.
func (nd *Node) Kill() {
	if nd.Running() {
		nd.cmd.Process.Signal(syscall.SIGKILL)
		<-nd.exited
	}
}

// Term sends SIGTERM and waits up to timeout for a clean exit; past it the
// process is killed and the error says so.
func (nd *Node) Term(timeout time.Duration) error {
	if !nd.Running() {
		return nd.Wait()
	}
	nd.cmd.Process.Signal(syscall.SIGTERM)
	if exited, err := nd.WaitTimeout(timeout); exited {
		return err
	}
	nd.Kill()
	return fmt.Errorf("%s did not stop within %s of SIGTERM", nd.ID, timeout)
}

// URL is the node's HTTP base address followed by path.
func (nd *Node) URL(path string) string { return scheme() + "://" + nd.HTTPAddr + path }

// Logs returns the node's log since its last start.
func (nd *Node) Logs() string {
	b, _ := os.ReadFile(nd.LogPath)
	return string(b)
}

// LogTail returns the last lines of the log.
func (nd *Node) LogTail(lines int) []string {
	f, err := os.Open(nd.LogPath)
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

// Cluster is a cluster of limitd processes in one directory.
type Cluster struct {
	Dir   string
	Nodes []*Node
	// Group names the nodes' CPU groups (GroupRunName; Options.NodeCPU),
	// "" without.
	Group string
}

// Timeouts of a Cluster: start-up (all nodes ready), and SIGTERM to exit.
var (
	StartTimeout = 60 * time.Second
	StopTimeout  = 10 * time.Second
)

// Start starts one node per id in dir (data in dir/<id>, log in
// dir/<id>.log) on free loopback ports and waits until every node is ready
// and the first lists them all. The first bootstraps; the others join it.
// On failure everything started is stopped and the error carries the end of
// the nodes' logs. dir is not removed: Stop does that.
func Start(ctx context.Context, dir string, ids []string, extra []string) (*Cluster, error) {
	return StartOpts(ctx, dir, ids, Options{Extra: extra})
}

// Options are the choices of StartOpts.
type Options struct {
	Extra []string // flags after the node's identity flags
	// GRPC: every node also serves gRPC on a free loopback port of its own
	// (Node.GRPCAddr).
	GRPC bool
	// Procs, when > 0, is every node's GOMAXPROCS (an inherited GOMAXPROCS
	// is replaced).
	Procs int
	// NodeCPU, when > 0, is every node's CPU budget: each node process in
	// a cpu cgroup of its own, <CgroupCPURoot>/<Cluster.Group>-n<i>, with a
	// quota of NodeCPU × CPUPeriod (DefaultCPUPeriod when 0), and
	// GOMAXPROCS 1 unless Procs says otherwise (one runtime thread per
	// fraction of a CPU: more would only queue on the quota). Stop removes
	// the groups.
	NodeCPU   float64
	CPUPeriod time.Duration
	// CPUShares, when > 0, is every node group's cpu.shares (SetShares).
	CPUShares int
}

// StartOpts is Start with options.
func StartOpts(ctx context.Context, dir string, ids []string, o Options) (*Cluster, error) {
	extra := o.Extra
	exe, prefix, err := Serve()
	if err != nil {
		return nil, fmt.Errorf("find the limitd executable: %w", err)
	}
	c := &Cluster{Dir: dir}
	ports, err := FreeLoopbackAddrs(3 * len(ids))
	if err != nil {
		return nil, err
	}
	procs := o.Procs
	if o.NodeCPU > 0 {
		c.Group = GroupRunName()
		if procs == 0 {
			procs = 1
		}
	}
	for i, id := range ids {
		nd := &Node{
			ID: id, HTTPAddr: ports[2*i], RaftAddr: ports[2*i+1],
			DataDir: filepath.Join(dir, id), LogPath: filepath.Join(dir, id+".log"),
			Exe: exe, Prefix: prefix, Procs: procs,
		}
		if o.NodeCPU > 0 {
			g, err := NewCPUGroup(fmt.Sprintf("%s-n%d", c.Group, i+1), o.NodeCPU, o.CPUPeriod)
			if err != nil {
				c.removeGroups()
				return nil, err
			}
			nd.CPUGroup = g
			if o.CPUShares > 0 {
				if err := g.SetShares(o.CPUShares); err != nil {
					g.Remove()
					c.removeGroups()
					return nil, err
				}
			}
		}
		if o.GRPC {
			nd.GRPCAddr = ports[2*len(ids)+i]
		}
		if i > 0 {
			nd.Join = c.Nodes[0].URL("")
		}
		c.Nodes = append(c.Nodes, nd)
	}
	fail := func(err error) (*Cluster, error) {
		err = fmt.Errorf("%w%s", err, c.LogTails(20))
		c.StopNodes()
		c.removeGroups()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	if err := c.Nodes[0].Start(extra...); err != nil {
		return fail(err)
	}
	if err := c.WaitReady(ctx, c.Nodes[:1], 1); err != nil {
		return fail(err)
	}
	for _, nd := range c.Nodes[1:] {
		if err := nd.Start(extra...); err != nil {
			return fail(err)
		}
	}
	if err := c.WaitReady(ctx, c.Nodes, len(c.Nodes)); err != nil {
		return fail(err)
	}
	return c, nil
}

// FreeLoopbackAddrs reserves n distinct free ports by holding them all open
// at once, then releases them for the nodes to bind. The ports are below the
// kernel's ephemeral range when it leaves room (ephemeralPortsFrom): a port
// from that range can be taken by any outgoing connection — another test's
// client — between its release and the node's bind, or while a node
// restarts on it, which failed process tests with "address already in use".
func FreeLoopbackAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	lo, hi := portSlice(minTestPort, ephemeralPortsFrom(), os.Getpid())
	addrs := make([]string, n)
	for i := range addrs {
		var ln net.Listener
		var err error
		for try := 0; try < 100 && hi-lo > 100; try++ {
			port := lo + rand.IntN(hi-lo)
			if !handOut(port) {
				continue // handed out before: its node may not have bound it yet
			}
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

// handedOut is every port FreeLoopbackAddrs gave this process: a port is
// handed out once, since between its release and its node's bind (a start,
// or a restart on the same address) only the test that holds it may take it.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// handOut records port as given, false if it was already.
func handOut(port int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	if handedOut.ports[port] {
		return false
	}
	handedOut.ports[port] = true
	return true
}

// portSlice is the part of [lo, hi) a process picks from: one of eight by
// its pid, so that two test binaries running side by side (go test runs
// packages in parallel) rarely pick from the same ports. A range too
// narrow to cut is used whole.
func portSlice(lo, hi, pid int) (int, int) {
	const slices = 8
	w := (hi - lo) / slices
	if w <= 200 {
		return lo, hi
	}
	from := lo + (pid%slices)*w
	return from, from + w
}

// minTestPort is the lowest port FreeLoopbackAddrs picks (above the
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

func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, nd := range c.Nodes {
		out[i] = nd.URL("")
	}
	return out
}

// WaitReady polls until every node in nodes answers /readyz and the first
// node's /v1/cluster lists members members.
func (c *Cluster) WaitReady(ctx context.Context, nodes []*Node, members int) error {
	var last error
	for {
		last = nil
		for _, nd := range nodes {
			if nd.cmd != nil && !nd.Running() {
				return fmt.Errorf("%s exited during start-up (%s)", nd.ID, nd.cmd.ProcessState)
			}
			if err := GetReady(ctx, nd.URL("")); err != nil {
				last = fmt.Errorf("%s: %w", nd.ID, err)
				break
			}
		}
		if last == nil {
			n, err := ClusterMembers(ctx, nodes[0].URL(""))
			if err == nil && n == members {
				return nil
			}
			last = fmt.Errorf("%s lists %d of %d members (%v)", nodes[0].ID, n, members, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %w (%v)", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// GetReady asks the node at addr (a base URL) for GET /readyz; nil when it
// answers 200.
func GetReady(ctx context.Context, addr string) error {
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

// ClusterMembers is the number of members the node at addr (a base URL)
// lists in GET /v1/cluster.
func ClusterMembers(ctx context.Context, addr string) (int, error) {
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

// Stop stops every node (StopNodes), removes their CPU groups and the
// cluster directory.
func (c *Cluster) Stop() error {
	err := c.StopNodes()
	if gerr := c.removeGroups(); gerr != nil {
		err = errors.Join(err, gerr)
	}
	if rerr := os.RemoveAll(c.Dir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("remove cluster directory: %w", rerr))
	}
	return err
}

// removeGroups removes the nodes' CPU groups (their processes have exited).
func (c *Cluster) removeGroups() error {
	var errs []error
	for _, nd := range c.Nodes {
		if nd.CPUGroup != nil {
			if err := nd.CPUGroup.Remove(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// StopNodes sends SIGTERM to every node and kills those still running
// StopTimeout later. The error names nodes that had exited before (they
// crashed; their logs are attached) and nodes that had to be killed.
func (c *Cluster) StopNodes() error {
	var crashed []string
	for _, nd := range c.Nodes {
		if nd.Running() {
			nd.cmd.Process.Signal(syscall.SIGTERM)
		} else if nd.cmd != nil {
			crashed = append(crashed, fmt.Sprintf("%s exited during the run (%s)", nd.ID, nd.cmd.ProcessState))
		}
	}
	var tails string
	if len(crashed) > 0 {
		tails = c.LogTails(20)
	}
	deadline := time.Now().Add(StopTimeout)
	var killed []string
	for _, nd := range c.Nodes {
		if nd.cmd == nil {
			continue
		}
		if exited, _ := nd.WaitTimeout(max(time.Until(deadline), 0)); !exited {
			nd.Kill()
			killed = append(killed, nd.ID)
		}
	}
	var errs []error
	if len(crashed) > 0 {
		errs = append(errs, fmt.Errorf("%s%s", strings.Join(crashed, "; "), tails))
	}
	if len(killed) > 0 {
		errs = append(errs, fmt.Errorf("killed %s: no exit within %s of SIGTERM", strings.Join(killed, ", "), StopTimeout))
	}
	return errors.Join(errs...)
}

// Footprint returns the largest node's data directory size and resident
// memory (0 where the platform does not tell).
func (c *Cluster) Footprint() (disk, rss int64) {
	for _, nd := range c.Nodes {
		var size int64
		filepath.WalkDir(nd.DataDir, func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if info, err := d.Info(); err == nil {
					size += info.Size()
				}
			}
			return nil
		})
		disk = max(disk, size)
		if nd.Running() {
			rss = max(rss, ProcessRSS(nd.PID()))
		}
	}
	return disk, rss
}

// ProcessRSS reads VmRSS from /proc (Linux); 0 elsewhere.
func ProcessRSS(pid int) int64 {
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

// LogTails returns the last lines of every node's log, for start-up errors.
func (c *Cluster) LogTails(lines int) string {
	var b strings.Builder
	for _, nd := range c.Nodes {
		if tail := nd.LogTail(lines); len(tail) > 0 {
			fmt.Fprintf(&b, "\n--- %s log (last %d lines) ---\n%s", nd.ID, len(tail), strings.Join(tail, "\n"))
		}
	}
	return b.String()
}

// ChildRaces makes the processes this (race-built) test binary starts from
// now on write their data-race reports under dir (GORACE log_path: read by
// each child at its start; this process's own reports still go to stderr).
// The returned report prints every report found, saying whose they are, and
// is true when there was any, so a TestMain can fail the run on them.
func ChildRaces(dir string) (report func(w io.Writer, whose string) bool) {
	raceLog := filepath.Join(dir, "race")
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" log_path="+raceLog))
	return func(w io.Writer, whose string) bool {
		reports, _ := filepath.Glob(raceLog + ".*")
		for _, r := range reports {
			b, _ := os.ReadFile(r)
			fmt.Fprintf(w, "%s reported a data race (%s):\n%s\n", whose, r, b)
		}
		return len(reports) > 0
	}
}
