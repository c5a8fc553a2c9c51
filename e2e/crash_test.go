package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/internal/proccluster"
	"github.com/limitd/limitd/internal/testtool"
)

// Process-level crash tests: real limitd processes on loopback, clients that
// record every answer, kill -9 of the leader under load (and in the middle of
// snapshots), restarts, and an audit afterwards: every request carries a
// request_id, so once the cluster is whole again the test retries every
// request whose answer it never got until each one is decided. Then the state
// must hold exactly the acknowledged decisions — a daily-quota key's used
// count equals the number of allowed answers, no small key admitted more
// than its limit — and every node's state database must have the same digest.
//
// LIMITD_CHAOS_ROUNDS sets the number of kill rounds (default 2);
// scripts/chaos.sh runs the long version and aggregates the CHAOS-SUMMARY lines.

// crashWindow returns a fixed-window length in whole hours with no window
// boundary within d from now (fixed windows are aligned to the epoch).
func crashWindow(d time.Duration) string {
	now := time.Now().UnixNano()
	for k := int64(1); ; k++ {
		w := k * int64(time.Hour)
		if now/w == (now+int64(d))/w {
			return fmt.Sprintf("%dh", k)
		}
	}
}

type crashLimit struct {
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Window    string `json:"window"`
}

type crashCheck struct {
	Key       string     `json:"key"`
	Limit     crashLimit `json:"limit"`
	Cost      int64      `json:"cost"`
	RequestID string     `json:"request_id,omitempty"`
}

type crashAnswer struct {
	Allowed   bool  `json:"allowed"`
	Remaining int64 `json:"remaining"`
	Replayed  bool  `json:"replayed"`
	Error     *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// crashOutcome is what one HTTP attempt told the client.
type crashOutcome int

const (
	crashAllowed crashOutcome = iota
	crashRefused
	crashUnknown // 503 outcome_unknown or unavailable, or no answer: may or may not have counted
)

// crashLoad is the clients' view of the cluster: the processes, and an
// account of every request sent.
type crashLoad struct {
	t      *testing.T
	procs  []*proc
	client *http.Client

	up sync.Map // node id → bool: clients only send to running processes

	mu       sync.Mutex
	keys     map[string]*crashKey
	pending  []crashCheck // requests whose answer is still unknown
	ops      int
	allowed  int
	refused  int
	unknown  int // attempts that ended without a decision (resolved later)
	oddities []string
}

type crashKey struct {
	check   crashCheck
	allowed int64 // acknowledged allowed cost
}

func newCrashLoad(t *testing.T, procs []*proc) *crashLoad {
	l := &crashLoad{
		t:      t,
		procs:  procs,
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}},
		keys:   map[string]*crashKey{},
	}
	for _, p := range procs {
		l.up.Store(p.ID, true)
	}
	t.Cleanup(l.client.CloseIdleConnections)
	return l
}

func (l *crashLoad) setUp(p *proc, up bool) { l.up.Store(p.ID, up) }

// pick returns a random running process, follower or leader alike.
func (l *crashLoad) pick(rng *rand.Rand) *proc {
	for {
		p := l.procs[rng.Intn(len(l.procs))]
		if up, _ := l.up.Load(p.ID); up.(bool) {
			return p
		}
	}
}

// send makes one attempt. An answer that is neither a decision nor a 503
// is outside the API's contract and is recorded as an oddity.
func (l *crashLoad) send(p *proc, c crashCheck) (crashOutcome, crashAnswer) {
	body, _ := json.Marshal(c)
	var a crashAnswer
	resp, err := l.client.Post(p.URL("/v1/check"), "application/json", bytes.NewReader(body))
	if err != nil {
		return crashUnknown, a // refused, reset or timed out: unknown
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return crashUnknown, a
	}
	if err := json.Unmarshal(data, &a); err != nil {
		l.oddity(fmt.Sprintf("%s: undecodable answer %d %q", p.ID, resp.StatusCode, data))
		return crashUnknown, a
	}
	switch {
	case resp.StatusCode == http.StatusOK && a.Allowed:
		return crashAllowed, a
	case resp.StatusCode == http.StatusOK:
		return crashRefused, a
	case resp.StatusCode == http.StatusServiceUnavailable && a.Error != nil &&
		(a.Error.Code == "outcome_unknown" || a.Error.Code == "unavailable"):
		return crashUnknown, a
	}
	l.oddity(fmt.Sprintf("%s: answer outside the contract: %d %s", p.ID, resp.StatusCode, data))
	return crashUnknown, a
}

func (l *crashLoad) oddity(s string) {
	l.mu.Lock()
	l.oddities = append(l.oddities, s)
	l.mu.Unlock()
}

// record accounts for a decided request.
func (l *crashLoad) record(c crashCheck, o crashOutcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[c.Key]
	if k == nil {
		k = &crashKey{check: crashCheck{Key: c.Key, Limit: c.Limit}}
		l.keys[c.Key] = k
	}
	switch o {
	case crashAllowed:
		l.allowed++
		k.allowed += c.Cost
	case crashRefused:
		l.refused++
	}
}

// do sends c, retrying with its request_id a few times on an unknown answer;
// what stays unknown is resolved by resolve once the cluster is whole.
func (l *crashLoad) do(rng *rand.Rand, c crashCheck) {
	l.mu.Lock()
	l.ops++
	l.mu.Unlock()
	for try := 0; try < 3; try++ {
		o, _ := l.send(l.pick(rng), c)
		if o != crashUnknown {
			l.record(c, o)
			return
		}
		l.mu.Lock()
		l.unknown++
		l.mu.Unlock()
		time.Sleep(time.Duration(50+rng.Intn(100)) * time.Millisecond)
	}
	l.mu.Lock()
	l.pending = append(l.pending, c)
	l.mu.Unlock()
}

// resolve retries every pending request with its request_id until it is
// decided: a replay of the original decision if it was applied, a fresh
// decision otherwise. Either way it then counts exactly once.
func (l *crashLoad) resolve(rng *rand.Rand) {
	l.t.Helper()
	l.mu.Lock()
	pending := l.pending
	l.pending = nil
	l.mu.Unlock()
	for _, c := range pending {
		for try := 0; ; try++ {
			o, _ := l.send(l.pick(rng), c)
			if o != crashUnknown {
				l.record(c, o)
				break
			}
			if try == 50 {
				l.t.Fatalf("request %s on %s still undecided after %d retries", c.RequestID, c.Key, try)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// worker sends checks until stop: half to a daily-quota key, half to small
// keys shared by all workers a few at a time, each seeing about a dozen checks.
func (l *crashLoad) worker(id int, seed int64, gen *atomic.Int64, fixedWindow string, stop <-chan struct{}) {
	rng := rand.New(rand.NewSource(seed))
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		c := crashCheck{Cost: 1, RequestID: fmt.Sprintf("w%d-%d", id, seq)}
		if rng.Intn(2) == 0 {
			c.Key = "daily-quota"
			c.Limit = crashLimit{Algorithm: "sliding_log", Limit: 1_000_000, Window: "24h"}
		} else {
			idx := int(gen.Add(1)/48)*4 + rng.Intn(4)
			if idx%2 == 0 {
				c.Key = fmt.Sprintf("sl/%d", idx)
				c.Limit = crashLimit{Algorithm: "sliding_log", Limit: 5, Window: "24h"}
			} else {
				c.Key = fmt.Sprintf("fw/%d", idx)
				c.Limit = crashLimit{Algorithm: "fixed_window", Limit: 4, Window: fixedWindow}
			}
		}
		l.do(rng, c)
	}
}

// clusterView is the part of GET /v1/cluster the tests read.
type clusterView struct {
	LeaderID string `json:"leader_id"`
}

func (l *crashLoad) view(p *proc) (clusterView, error) {
	var v clusterView
	resp, err := l.client.Get(p.URL("/v1/cluster"))
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET /v1/cluster on %s: %s", p.ID, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// leader waits until a running process other than `not` reports a leader
// among the running processes, and returns it.
func (l *crashLoad) leader(not *proc, timeout time.Duration) *proc {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, p := range l.procs {
			if up, _ := l.up.Load(p.ID); p == not || !up.(bool) {
				continue
			}
			v, err := l.view(p)
			if err != nil || v.LeaderID == "" {
				continue
			}
			for _, q := range l.procs {
				if q.ID == v.LeaderID && q != not {
					return q
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.t.Fatalf("no leader among the running nodes within %s", timeout)
	return nil
}

type digestView struct {
	Digest       string `json:"digest"`
	AppliedIndex uint64 `json:"applied_index"`
}

func (l *crashLoad) digest(p *proc) (digestView, error) {
	var d digestView
	resp, err := l.client.Get(p.URL("/v1/cluster/digest"))
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return d, fmt.Errorf("GET /v1/cluster/digest on %s: %s %s", p.ID, resp.Status, b)
	}
	return d, json.NewDecoder(resp.Body).Decode(&d)
}

// waitConverged waits until every process reports, through
// GET /v1/cluster/digest, the same applied index and the same state digest.
// Replicas at the same index with different digests have diverged.
func (l *crashLoad) waitConverged(timeout time.Duration) {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	var views []digestView
	var errs []error
	for time.Now().Before(deadline) {
		views, errs = views[:0], errs[:0]
		same := true
		for _, p := range l.procs {
			d, err := l.digest(p)
			if err != nil {
				errs = append(errs, err)
				same = false
			}
			if len(views) > 0 && (d.AppliedIndex != views[0].AppliedIndex || d.Digest != views[0].Digest) {
				same = false
			}
			views = append(views, d)
		}
		if same {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	l.t.Fatalf("replicas did not converge within %s: %+v %v", timeout, views, errs)
}

// peek reads a key's remaining budget through p (a cost-0 check).
func (l *crashLoad) peek(p *proc, k *crashKey) int64 {
	l.t.Helper()
	c := k.check
	c.Cost, c.RequestID = 0, ""
	for try := 0; ; try++ {
		o, a := l.send(p, c)
		if o != crashUnknown {
			return a.Remaining
		}
		if try == 50 {
			l.t.Fatalf("peek of %s on %s: no answer", c.Key, p.ID)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// audit checks every key's state against the acknowledged decisions, through
// every node, and returns the over-admitted keys and lost or phantom counts.
func (l *crashLoad) audit() (over int, lost, phantom int64) {
	l.t.Helper()
	names := make([]string, 0, len(l.keys))
	for k := range l.keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		k := l.keys[name]
		if k.allowed > k.check.Limit.Limit {
			over++
			l.t.Errorf("%s: %d allowed answers, limit %d", name, k.allowed, k.check.Limit.Limit)
		}
		for _, p := range l.procs {
			used := k.check.Limit.Limit - l.peek(p, k)
			switch {
			case used < k.allowed:
				lost += k.allowed - used
				l.t.Errorf("%s on %s: state shows %d used, %d allowed answers were received", name, p.ID, used, k.allowed)
			case used > k.allowed:
				phantom += used - k.allowed
				l.t.Errorf("%s on %s: state shows %d used, only %d allowed answers (counted twice, or a refused or unknown request counted)", name, p.ID, used, k.allowed)
			}
		}
	}
	return over, lost, phantom
}

// stateDigests stops every process cleanly and reads each one's state
// database directly: a second, offline comparison of the replicas, which
// also shows SIGTERM left every database closed cleanly.
func stateDigests(t *testing.T, procs []*proc) map[string]string {
	t.Helper()
	digests := map[string]string{}
	for _, p := range procs {
		if err := p.term(); err != nil {
			t.Fatalf("stop %s: %v\n%s", p.ID, err, p.Logs())
		}
	}
	for _, p := range procs {
		f, err := fsm.Open(filepath.Join(p.DataDir, "fsm.db"), fsm.Options{})
		if err != nil {
			t.Fatalf("open %s's state database: %v", p.ID, err)
		}
		if f.Recovered() {
			t.Errorf("%s's state database was not closed cleanly by SIGTERM", p.ID)
		}
		// Nodes stop one after another, so an expiry sweep may land between
		// them and move LastTime: compare the data, not the meta record.
		d, err := f.DataDigest()
		f.Close()
		if err != nil {
			t.Fatalf("digest of %s: %v", p.ID, err)
		}
		digests[p.ID] = d
	}
	return digests
}

func crashSummary(t *testing.T, fields map[string]any) {
	fields["test"] = t.Name()
	line, _ := json.Marshal(fields)
	t.Logf("CHAOS-SUMMARY %s", line)
}

// startCrashCluster starts three nodes: n1 bootstraps, n2 and n3 join it.
func startCrashCluster(t *testing.T, extra ...string) []*proc {
	t.Helper()
	old := proccluster.Serve
	proccluster.Serve = func() (string, []string, error) { return limitdBin, []string{"serve"}, nil }
	defer func() { proccluster.Serve = old }()
	c, err := proccluster.Start(context.Background(), t.TempDir(), []string{"n1", "n2", "n3"}, extra)
	if err != nil {
		t.Fatal(err)
	}
	procs := make([]*proc, len(c.Nodes))
	for i, nd := range c.Nodes {
		procs[i] = &proc{Node: nd, t: t}
		t.Cleanup(nd.Kill)
	}
	return procs
}

// The common flags: retention long enough that every unknown request can be
// resolved by its request_id at the end, even in the long chaos run.
var crashFlags = []string{"--request-id-retention", "2h", "--apply-timeout", "2s"}

func TestCrashKill9LeaderUnderLoad(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	rounds, rng, began, procs, l := startChaos(t, 2)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var gen atomic.Int64
	fixed := crashWindow(time.Duration(rounds)*30*time.Second + 30*time.Minute)
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int, s int64) { defer wg.Done(); l.worker(w, s, &gen, fixed, stop) }(w, rng.Int63())
	}
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWorkers() // also when a round fails the test

	killed := map[*proc]bool{}
	leaderChanges := 0
	for round := 0; round < rounds; round++ {
		time.Sleep(time.Duration(500+rng.Intn(700)) * time.Millisecond)
		old := l.leader(nil, 20*time.Second)
		l.setUp(old, false)
		old.Kill()
		next := l.leader(old, 20*time.Second)
		leaderChanges++
		t.Logf("round %d: killed leader %s, new leader %s", round, old.ID, next.ID)
		time.Sleep(time.Duration(300+rng.Intn(500)) * time.Millisecond)
		old.start(crashFlags...)
		old.waitReady()
		l.setUp(old, true)
		killed[old] = true
	}
	time.Sleep(300 * time.Millisecond)
	stopWorkers()

	l.resolve(rng)
	l.waitConverged(30 * time.Second)
	over, lost, phantom := l.audit()
	digests := stateDigests(t, procs)
	for _, p := range procs {
		if killed[p] && !strings.Contains(p.Logs(), "unclean") {
			t.Errorf("%s restarted after kill -9 without reporting an unclean stop:\n%s", p.ID, p.Logs())
		}
		if digests[p.ID] != digests[procs[0].ID] {
			t.Errorf("state digests differ: %v", digests)
			break
		}
	}
	crashSummary(t, map[string]any{
		"nodes": 3, "rounds": rounds, "leader_changes": leaderChanges, "ops": l.ops,
		"allowed": l.allowed, "refused": l.refused, "unknown": l.unknown,
		"over_admissions": over, "lost_acknowledged": lost, "phantom": phantom,
		"linearizable": "n/a", "seconds": time.Since(began).Seconds(),
	})
	if l.allowed == 0 || l.refused == 0 {
		t.Errorf("allowed %d, refused %d: the run must exercise both", l.allowed, l.refused)
	}
	for i, o := range l.oddities {
		if i == 5 {
			t.Errorf("... %d oddities in all", len(l.oddities))
			break
		}
		t.Error(o)
	}
}

// snapshotFlags are the serve flags that make Raft snapshot every few dozen
// entries, so that a kill lands in the middle of one. The test fails (never
// skips) if `serve --help` fails or no longer lists them: a renamed flag must
// not turn the snapshot crash tests into skips.
func snapshotFlags(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command(limitdBin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("limitd serve --help: %v\n%s", err, out)
	}
	for _, f := range []string{"--snapshot-threshold", "--snapshot-interval"} {
		if !strings.Contains(string(out), f[1:]) {
			t.Fatalf("limitd serve --help does not list %s (renamed?); the snapshot crash tests need it:\n%s", f, out)
		}
	}
	return []string{"--snapshot-threshold", "16", "--snapshot-interval", "10ms"}
}

// tmpSnapshots counts snapshot directories Raft started but never finished:
// each is a kill that landed in the middle of writing a snapshot.
func tmpSnapshots(t *testing.T, dataDir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dataDir, "snapshots", "*.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// checkBatch sends a /v1/check/batch of checks and returns how many were
// allowed, or an error if the answer was not a decision for every check.
func checkBatch(client *http.Client, p *proc, checks []crashCheck) (int, error) {
	body, _ := json.Marshal(map[string]any{"checks": checks})
	resp, err := client.Post(p.URL("/v1/check/batch"), "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Results []crashAnswer `json:"results"`
	}
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", resp.Status, data)
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Results) != len(checks) {
		return 0, fmt.Errorf("answer %q: %v", data, err)
	}
	n := 0
	for _, r := range out.Results {
		if r.Error != nil {
			return 0, fmt.Errorf("check failed: %+v", *r.Error)
		}
		if r.Allowed {
			n++
		}
	}
	return n, nil
}

// quota is a large daily-style quota: a fixed window of whole hours with no
// boundary during the test, so its used count is exactly what was allowed.
var quota = crashLimit{Algorithm: "fixed_window", Limit: 1_000_000_000, Window: crashWindow(3 * time.Hour)}

// fillKeys gives a node many keys so that its snapshots take a while to write.
func fillKeys(t *testing.T, client *http.Client, p *proc, n int) {
	t.Helper()
	for i := 0; i < n; i += 1000 {
		checks := make([]crashCheck, 0, 1000)
		for j := i; j < i+1000 && j < n; j++ {
			checks = append(checks, crashCheck{Key: fmt.Sprintf("fill/%d", j), Limit: quota, Cost: 1})
		}
		if _, err := checkBatch(client, p, checks); err != nil {
			t.Fatalf("fill keys: %v", err)
		}
	}
}

// Kill -9 a node again and again while it applies a stream of quota checks
// and writes snapshots every few dozen entries; after every restart (Raft
// restores the latest complete snapshot and replays the log) the quota must
// hold exactly the allowed answers received, after retrying the requests cut
// off by the kill with their request_id.
func TestCrashKill9DuringSnapshotAndApply(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	snap := snapshotFlags(t)
	flags := append(append([]string{}, crashFlags...), snap...)
	p := newProc(t, "solo", "")
	p.start(flags...)
	p.waitReady()
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	fillKeys(t, client, p, 20_000)

	rounds := testtool.ChaosRounds(t, 4)
	midSnapshot, sent := 0, 0
	var allowed atomic.Int64
	for round := 0; round < rounds; round++ {
		before := tmpSnapshots(t, p.DataDir)
		// Four writers of quota batches, each remembering the request ids it
		// sent but got no answer for.
		var wg sync.WaitGroup
		var mu sync.Mutex
		var cut [][]crashCheck
		stop := make(chan struct{})
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for seq := 0; ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					batch := make([]crashCheck, 20)
					for i := range batch {
						batch[i] = crashCheck{Key: "daily-quota", Limit: quota, Cost: 1, RequestID: fmt.Sprintf("r%d-w%d-%d-%d", round, w, seq, i)}
					}
					mu.Lock()
					sent += len(batch)
					mu.Unlock()
					n, err := checkBatch(client, p, batch)
					if err != nil {
						mu.Lock()
						cut = append(cut, batch)
						mu.Unlock()
						return // the node is gone
					}
					allowed.Add(int64(n))
				}
			}(w)
		}
		// Even rounds kill the moment a snapshot is being written, odd
		// rounds at a random moment of the apply stream.
		if round%2 == 0 {
			deadline := time.Now().Add(5 * time.Second)
			for tmpSnapshots(t, p.DataDir) == before && time.Now().Before(deadline) {
				time.Sleep(200 * time.Microsecond)
			}
		} else {
			time.Sleep(time.Duration(200+rand.Intn(400)) * time.Millisecond)
		}
		p.Kill()
		close(stop)
		wg.Wait()
		if tmpSnapshots(t, p.DataDir) > before {
			midSnapshot++
		}

		p.start(flags...)
		p.waitReady()
		for _, batch := range cut {
			n, err := checkBatch(client, p, batch)
			if err != nil {
				t.Fatalf("retry of a batch cut off by the kill: %v", err)
			}
			allowed.Add(int64(n))
		}
		c := crashCheck{Key: "daily-quota", Limit: quota}
		used := quota.Limit - p.check(mustJSON(c)).Remaining
		if used != allowed.Load() {
			t.Fatalf("round %d: quota used %d after kill -9 and restart, %d allowed answers received", round, used, allowed.Load())
		}
	}
	p.Kill()
	if !strings.Contains(p.Logs(), "unclean") {
		t.Errorf("restart after kill -9 did not rebuild from Raft; logs:\n%s", p.Logs())
	}
	t.Logf("%d rounds, %d checks sent, %d allowed; %d kills landed in the middle of a snapshot", rounds, sent, allowed.Load(), midSnapshot)
	crashSummary(t, map[string]any{
		"nodes": 1, "rounds": rounds, "ops": sent, "allowed": allowed.Load(),
		"kills_mid_snapshot": midSnapshot, "over_admissions": 0, "lost_acknowledged": 0, "phantom": 0,
		"linearizable": "n/a",
	})
	if midSnapshot == 0 {
		t.Errorf("no kill in %d rounds landed in the middle of a snapshot: the test did not exercise what it claims", rounds)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// A damaged file at start must stop the node with an error naming it, or —
// where the file is one the node rebuilds anyway — be rebuilt exactly; it
// must never start with silently empty or partial state.
func TestCrashDamagedFilesAtStart(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	snap := snapshotFlags(t)
	truncate := func(path string) error {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		return os.Truncate(path, fi.Size()/2)
	}
	snapshotFiles := func(p *proc) []string {
		m, _ := filepath.Glob(filepath.Join(p.DataDir, "snapshots", "*", "state.bin"))
		var done []string
		for _, f := range m {
			if !strings.HasSuffix(filepath.Dir(f), ".tmp") {
				done = append(done, f)
			}
		}
		// Snapshot directories are named term-index-time: oldest first.
		sort.Slice(done, func(i, j int) bool {
			a, b := snapshotOrder(done[i]), snapshotOrder(done[j])
			return a[0] < b[0] || a[0] == b[0] && a[1] < b[1]
		})
		return done
	}
	// What a start on a damaged file may do: refuse with an error naming the
	// file, or start with the exact state (when it can rebuild or the damage
	// missed the data). Never start with wrong state.
	const (
		mustRefuse = iota
		refuseOrExact
		mustRebuild
	)
	cases := []struct {
		name      string
		snapshots bool     // needs snapshot flags
		flags     []string // more serve flags
		unclean   bool     // stop with kill -9 (the state database is then rebuilt)
		damage    func(t *testing.T, p *proc) string
		want      int
	}{
		{name: "raft log garbage (boltdb)", flags: []string{"--log-store=boltdb"}, damage: func(t *testing.T, p *proc) string {
			path := filepath.Join(p.DataDir, "raft.db")
			must(t, os.WriteFile(path, bytes.Repeat([]byte("garbage!"), 4096), 0o600))
			return path
		}, want: mustRefuse},
		{name: "raft-wal meta database garbage", damage: func(t *testing.T, p *proc) string {
			dir := filepath.Join(p.DataDir, "raft-wal")
			must(t, os.WriteFile(filepath.Join(dir, "wal-meta.db"), bytes.Repeat([]byte("garbage!"), 4096), 0o600))
			return dir
		}, want: mustRefuse},
		{name: "raft-wal segments garbage", damage: func(t *testing.T, p *proc) string {
			dir := filepath.Join(p.DataDir, "raft-wal")
			segs, err := filepath.Glob(filepath.Join(dir, "*.wal"))
			must(t, err)
			if len(segs) == 0 {
				t.Fatalf("no segment files in %s", dir)
			}
			for _, seg := range segs {
				must(t, os.WriteFile(seg, bytes.Repeat([]byte("garbage!"), 4096), 0o600))
			}
			return dir
		}, want: mustRefuse},
		{name: "state database halved after a clean stop", damage: func(t *testing.T, p *proc) string {
			path := filepath.Join(p.DataDir, "fsm.db")
			must(t, truncate(path))
			return path
		}, want: refuseOrExact},
		{name: "state database cut to its meta pages after a clean stop", damage: func(t *testing.T, p *proc) string {
			path := filepath.Join(p.DataDir, "fsm.db")
			must(t, os.Truncate(path, 8192))
			return path
		}, want: refuseOrExact},
		{name: "state database garbage after kill -9", unclean: true, damage: func(t *testing.T, p *proc) string {
			path := filepath.Join(p.DataDir, "fsm.db")
			must(t, os.WriteFile(path, bytes.Repeat([]byte("garbage!"), 4096), 0o600))
			return path
		}, want: mustRebuild},
		{name: "every snapshot truncated after kill -9", snapshots: true, unclean: true, damage: func(t *testing.T, p *proc) string {
			files := snapshotFiles(p)
			if len(files) == 0 {
				t.Fatal("no snapshot was written")
			}
			for _, f := range files {
				must(t, truncate(f))
			}
			return "snapshot"
		}, want: mustRefuse},
		{name: "newest snapshot truncated after kill -9", snapshots: true, unclean: true, damage: func(t *testing.T, p *proc) string {
			files := snapshotFiles(p)
			if len(files) == 0 {
				t.Fatal("no snapshot was written")
			}
			must(t, truncate(files[len(files)-1]))
			return "snapshot"
		}, want: refuseOrExact},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			flags := append(append([]string{}, crashFlags...), tc.flags...)
			if tc.snapshots {
				flags = append(flags, snap...)
			}
			p := newProc(t, "d", "")
			p.start(flags...)
			p.waitReady()
			client := &http.Client{Timeout: 5 * time.Second}
			defer client.CloseIdleConnections()
			allowed := 0
			for i := 0; i < 40; i++ {
				batch := []crashCheck{{Key: "daily-quota", Limit: quota, Cost: 1}, {Key: fmt.Sprintf("k%d", i), Limit: quota, Cost: 1}}
				n, err := checkBatch(client, p, batch)
				if err != nil {
					t.Fatal(err)
				}
				allowed += n
			}
			if tc.snapshots {
				deadline := time.Now().Add(10 * time.Second)
				for len(snapshotFiles(p)) < 2 && time.Now().Before(deadline) {
					checkBatch(client, p, []crashCheck{{Key: "filler", Limit: quota, Cost: 1}})
				}
			}
			if tc.unclean {
				p.Kill()
			} else if err := p.term(); err != nil {
				t.Fatal(err)
			}
			what := tc.damage(t, p)

			p.start(flags...)
			ready, exitErr := startOutcome(p, 20*time.Second)
			switch {
			case !ready && tc.want != mustRebuild:
				// It refused to start: it must say why, naming the file.
				if exitErr == nil {
					t.Fatalf("exited 0 on a damaged %s; logs:\n%s", what, p.Logs())
				}
				if !strings.Contains(p.Logs(), what) {
					t.Fatalf("the error does not name the damaged %s:\n%s", what, p.Logs())
				}
				t.Logf("refused to start: %s", lastLine(p.Logs()))
			case !ready:
				t.Fatalf("did not start (%v) where it can rebuild its state; logs:\n%s", exitErr, p.Logs())
			case tc.want == mustRefuse:
				d := p.check(mustJSON(crashCheck{Key: "daily-quota", Limit: quota}))
				t.Fatalf("started on a damaged %s: quota remaining %d with %d checks allowed before", what, d.Remaining, allowed)
			default:
				// Started: the state must be exact, not empty or partial.
				d := p.check(mustJSON(crashCheck{Key: "daily-quota", Limit: quota}))
				if used := quota.Limit - d.Remaining; used != 40 {
					t.Fatalf("started with quota used %d, want 40: the state was not rebuilt exactly", used)
				}
			}
		})
	}
}

// startOutcome waits until p is ready or has exited. A process that exited
// has been waited for; one that is ready keeps running.
func startOutcome(p *proc, timeout time.Duration) (ready bool, exitErr error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if exited, err := p.WaitTimeout(0); exited {
			return false, err
		}
		if proccluster.GetReady(context.Background(), p.URL("")) == nil {
			return true, nil // p.start's cleanup kills it
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Kill()
	return false, fmt.Errorf("neither ready nor exited within %s: %w", timeout, p.Wait())
}

func snapshotOrder(path string) [2]uint64 {
	parts := strings.SplitN(filepath.Base(filepath.Dir(path)), "-", 3)
	var o [2]uint64
	for i := 0; i < 2 && i < len(parts); i++ {
		o[i], _ = strconv.ParseUint(parts[i], 10, 64)
	}
	return o
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// startChaos starts what every process chaos test starts from: its rounds
// (testtool.ChaosRounds, defaultRounds without LIMITD_CHAOS_ROUNDS), a random source
// seeded by testtool.ChaosSeed, its start time, three nodes and a load on them.
func startChaos(t *testing.T, defaultRounds int) (rounds int, rng *rand.Rand, began time.Time, procs []*proc, load *crashLoad) {
	t.Helper()
	rounds = testtool.ChaosRounds(t, defaultRounds)
	rng = rand.New(rand.NewSource(testtool.ChaosSeed(t)))
	began = time.Now()
	procs = startCrashCluster(t, crashFlags...)
	return rounds, rng, began, procs, newCrashLoad(t, procs)
}
