package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/overlimit"
)

// Fault tests: concurrent clients check keys while a nemesis partitions the
// leader away, isolates minorities, transfers leadership and restarts nodes.
// Every operation is recorded with its invoke and return times and checked
// with porcupine against the model in model_test.go, and directly: no key
// admitted more than its limit, and after healing every key's state accounts
// for every acknowledged decision.
//
// The default run is short (a few rounds per cluster size). scripts/chaos.sh
// runs the long version: LIMITD_CHAOS_ROUNDS=N sets the rounds per test,
// LIMITD_CHAOS_SEED fixes the nemesis and client randomness. Each test logs a
// "CHAOS-SUMMARY {json}" line that the script aggregates.

func chaosRounds(t *testing.T, short int) int {
	if v := os.Getenv("LIMITD_CHAOS_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LIMITD_CHAOS_ROUNDS=%q: want a positive integer", v)
		}
		return n
	}
	return short
}

func chaosSeed(t *testing.T) int64 {
	seed := time.Now().UnixNano()
	if v := os.Getenv("LIMITD_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("LIMITD_CHAOS_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("seed %d (LIMITD_CHAOS_SEED=%d repeats the fault and client choices; timing still varies)", seed, seed)
	return seed
}

// stableWindow returns a fixed-window length (a whole number of hours) with
// no window boundary within d from now: fixed windows are aligned to the
// epoch, and a boundary crossed mid-test would legitimately reset a key.
func stableWindow(d time.Duration) time.Duration {
	now := time.Now().UnixNano()
	for k := int64(1); ; k++ {
		w := k * int64(time.Hour)
		if now/w == (now+int64(d))/w {
			return time.Duration(w)
		}
	}
}

// newFaultCluster is the harness's cluster whose node-to-node HTTP loses
// about 2% of forwarded responses (drawn from seed), with the snapshot
// policy snap.
func newFaultCluster(t *testing.T, size int, snap clustertest.SnapshotPolicy, seed int64) *clustertest.Cluster {
	t.Helper()
	// With frequent snapshots and few trailing logs, a follower that falls
	// behind a partition or a restart catches up through InstallSnapshot.
	// With rare ones, a restarted node replays a long stretch of log it had
	// already applied and catches up from the log, so a replica that applied
	// entries twice keeps its wrong state for the convergence check to see.
	snap.Interval = 100 * time.Millisecond
	// The over-limit cache is on, as in limitd serve: its invalidations run
	// on every apply, restore (InstallSnapshot) and fatal stop under the
	// faults, and attempt answers from it first.
	return clustertest.MakeClusterOpts(t, clustertest.Options{
		Nodes: size, Snapshots: snap, DropResponses: 0.02, Seed: seed,
		Config: func(_ int, cfg *cluster.Config) { cfg.OverLimitEntries = 4096 },
	})
}

// faultKeys hands out keys in generations: all clients share a few keys at a
// time, so checks on one key race, and a new generation starts once each key
// has seen about opsPerKey operations, so keys do not all end up spent. Each
// generation also has a quota key whose limit is never reached: every check
// on it changes state, so a replica that applies an entry twice diverges.
type faultKeys struct {
	ops        atomic.Int64
	perGen     int
	opsPerKey  int
	slidingLog *algo.Spec
	fixed      *algo.Spec
	quota      *algo.Spec
}

func newFaultKeys(window time.Duration) *faultKeys {
	spec := func(s algo.Spec) *algo.Spec {
		v, err := s.Validate()
		if err != nil {
			panic(err)
		}
		return &v
	}
	return &faultKeys{
		perGen: 4, opsPerKey: 12,
		slidingLog: spec(algo.Spec{Algorithm: algo.SlidingLog, Limit: 5, Window: 24 * time.Hour}),
		fixed:      spec(algo.Spec{Algorithm: algo.FixedWindow, Limit: 4, Window: window}),
		quota:      spec(algo.Spec{Algorithm: algo.SlidingLog, Limit: 100000, Window: 24 * time.Hour}),
	}
}

// next picks the key and limit of the next operation.
func (k *faultKeys) next(rng *rand.Rand) (string, *algo.Spec) {
	gen := int(k.ops.Add(1) / int64(k.perGen*k.opsPerKey))
	if rng.Intn(4) == 0 {
		return fmt.Sprintf("quota/%d", gen), k.quota
	}
	idx := gen*k.perGen + rng.Intn(k.perGen)
	if idx%2 == 0 {
		return fmt.Sprintf("sl/%d", idx), k.slidingLog
	}
	return fmt.Sprintf("fw/%d", idx), k.fixed
}

// faultRun drives clients against a fault cluster and records the history.
type faultRun struct {
	c     *clustertest.Cluster
	keys  *faultKeys
	start time.Time

	// gate lets the nemesis pause the clients: each operation holds it
	// shared, from its first attempt to its last retry.
	gate sync.RWMutex

	mu      sync.Mutex
	recs    []record
	specs   map[string]*algo.Spec
	oddErrs []string // errors the node should never return
	retries int      // request_id retries after an unknown outcome
}

func (r *faultRun) now() int64 { return int64(time.Since(r.start)) }

func (r *faultRun) add(rec record, spec *algo.Spec, key string) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.specs[key] = spec
	r.mu.Unlock()
}

// pickNode returns a random running node; clients reach partitioned nodes
// too, as real clients would.
func (r *faultRun) pickNode(rng *rand.Rand) *cluster.Node {
	for {
		i := rng.Intn(r.c.Size())
		if n, up := r.c.Running(i); up {
			return n
		}
	}
}

// attempt runs one Check and classifies what the client learned.
func (r *faultRun) attempt(n *cluster.Node, op fsm.Op) (limiterOutput, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c := op.Checks[0]; op.RequestID == "" && c.Cost > 0 && c.Spec != nil {
		// As the service does: a check without request_id is answered from
		// the node's over-limit cache when it holds a refusal for it.
		id := overlimit.LimitID{Ident: string(algo.AppendSpec(nil, *c.Spec))}
		if _, hit := n.OverLimit().Refused(id, c.Key, c.Cost); hit {
			return limiterOutput{Outcome: outRefusedCached}, nil
		}
	}
	res, err := n.Check(ctx, []fsm.Op{op})
	switch {
	case err == nil && len(res) == 1 && res[0].Err == nil && len(res[0].Decisions) == 1:
		o := outRefused
		if res[0].Allowed {
			o = outAllowed
		}
		return limiterOutput{Outcome: o, Remaining: res[0].Decisions[0].Remaining}, nil
	case err == nil:
		return limiterOutput{Outcome: outUnknown}, fmt.Errorf("malformed result %+v", res)
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		return limiterOutput{Outcome: outUnknown}, nil
	case errors.Is(err, cluster.ErrNoLeader):
		return limiterOutput{Outcome: outNotApplied}, nil
	default:
		return limiterOutput{Outcome: outUnknown}, err
	}
}

// client runs operations until stop is closed. Half of the checks carry a
// request_id and are retried with it after an unknown outcome, as the API
// tells clients to; the others accept the unknown.
func (r *faultRun) client(id int, seed int64, stop <-chan struct{}) {
	rng := rand.New(rand.NewSource(seed))
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		r.gate.RLock()
		key, spec := r.keys.next(rng)
		var cost int64 = 1
		switch p := rng.Float64(); {
		case p < 0.15:
			cost = 0
		case p < 0.30:
			cost = 2
		}
		op := fsm.Op{Checks: []fsm.Check{{Key: key, Spec: spec, Cost: cost}}}
		retry := rng.Intn(2) == 0
		if retry {
			op.RequestID = fmt.Sprintf("c%d-%d", id, seq)
		}
		rec := record{Client: id, In: limiterInput{Key: key, Limit: spec.Limit, Cost: cost}, Call: r.now()}
		out, err := r.attempt(r.pickNode(rng), op)
		unknown := out.Outcome == outUnknown
		for tries := 0; retry && err == nil && tries < 5 && (out.Outcome == outUnknown || out.Outcome == outNotApplied); tries++ {
			time.Sleep(time.Duration(20+rng.Intn(80)) * time.Millisecond)
			r.mu.Lock()
			r.retries++
			r.mu.Unlock()
			out, err = r.attempt(r.pickNode(rng), op)
			unknown = unknown || out.Outcome == outUnknown
		}
		// Once an attempt may have been applied, only a definite answer (a
		// replay or a fresh decision under the same request_id) settles it.
		if unknown && out.Outcome == outNotApplied {
			out.Outcome = outUnknown
		}
		rec.Out, rec.Return = out, r.now()
		if err != nil {
			r.mu.Lock()
			r.oddErrs = append(r.oddErrs, fmt.Sprintf("client %d %s: %v", id, key, err))
			r.mu.Unlock()
		}
		r.add(rec, spec, key)
		r.gate.RUnlock()
	}
}

// nemesis is one fault. It returns what to undo after the hold (nil: nothing).
type nemesis struct {
	name string
	do   func(t testing.TB, c *clustertest.Cluster, rng *rand.Rand) (undo func())
}

var nemeses = []nemesis{
	{"partition-leader", func(t testing.TB, c *clustertest.Cluster, rng *rand.Rand) func() {
		if l := c.LeaderNow(); l >= 0 {
			c.Partition(l)
		}
		return c.Heal
	}},
	{"deaf-leader", func(t testing.TB, c *clustertest.Cluster, rng *rand.Rand) func() {
		if l := c.LeaderNow(); l >= 0 {
			c.Deafen(l)
		}
		return c.Heal
	}},
	{"isolate-minority", func(t testing.TB, c *clustertest.Cluster, rng *rand.Rand) func() {
		k := 1 + rng.Intn((c.Size()-1)/2)
		c.Partition(rng.Perm(c.Size())[:k]...)
		return c.Heal
	}},
	{"leader-in-minority", func(t testing.TB, c *clustertest.Cluster, rng *rand.Rand) func() {
		l := c.LeaderNow()
		if l < 0 {
			return c.Heal
		}
		set := []int{l}
		for _, i := range rng.Perm(c.Size()) {
			if len(set) < (c.Size()-1)/2 && i != l {
				set = append(set, i)
			}
		}
		c.Partition(set...)
		return c.Heal
	}},
	{"transfer-leadership", func(t testing.TB, c *clustertest.Cluster, rng *rand.Rand) func() {
		if l := c.LeaderNow(); l >= 0 {
			if n, up := c.Running(l); up {
				if err := n.Raft().LeadershipTransfer().Error(); err != nil {
					t.Logf("leadership transfer: %v", err)
				}
			}
		}
		return nil
	}},
	// Restarts are quick, so the node catches up from the log rather than
	// from a snapshot install that would paper over a replay bug.
	{"restart-follower", func(t testing.TB, c *clustertest.Cluster, rng *rand.Rand) func() {
		l := c.LeaderNow()
		i := rng.Intn(c.Size())
		if i == l {
			i = (i + 1) % c.Size()
		}
		c.Stop(i)
		time.Sleep(time.Duration(rng.Intn(50)) * time.Millisecond)
		c.Start(i)
		return nil
	}},
	{"restart-leader", func(t testing.TB, c *clustertest.Cluster, rng *rand.Rand) func() {
		if l := c.LeaderNow(); l >= 0 {
			c.Stop(l)
			time.Sleep(time.Duration(rng.Intn(50)) * time.Millisecond)
			c.Start(l)
		}
		return nil
	}},
}

// leaderID names the current leader and its term ("" if none).
func leaderID(c *clustertest.Cluster) string {
	l := c.LeaderNow()
	if l < 0 {
		return ""
	}
	n, _ := c.Running(l)
	return fmt.Sprintf("%s@%d", n.ID(), n.Raft().CurrentTerm())
}

// leaderWatch counts leader changes seen by polling, starting from last.
func leaderWatch(c *clustertest.Cluster, last string, stop <-chan struct{}, changes *atomic.Int64) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if id := leaderID(c); id != "" && id != last {
			changes.Add(1)
			last = id
		}
	}
}

// chaosSummary is the machine-readable result scripts/chaos.sh aggregates.
type chaosSummary struct {
	Test           string  `json:"test"`
	Nodes          int     `json:"nodes"`
	Rounds         int     `json:"rounds"`
	LeaderChanges  int64   `json:"leader_changes"`
	Ops            int     `json:"ops"`
	Allowed        int     `json:"allowed"`
	Refused        int     `json:"refused"`
	Cached         int     `json:"refused_from_cache"` // of Refused: answered by the over-limit cache
	Unknown        int     `json:"unknown"`
	NotApplied     int     `json:"not_applied"`
	Retries        int     `json:"request_id_retries"`
	OverAdmissions int     `json:"over_admissions"`
	LostAcks       int64   `json:"lost_acknowledged"`
	Phantom        int64   `json:"phantom"`
	Linearizable   string  `json:"linearizable"`
	Seconds        float64 `json:"seconds"`
}

// Three nodes snapshot rarely and catch up from the log after faults; five
// nodes snapshot often, keep few trailing logs and catch up through
// snapshot installs.
func TestFaultsThreeNodes(t *testing.T) {
	runFaults(t, 3, len(nemeses), 6, clustertest.SnapshotPolicy{Threshold: 2048, Trailing: 4096})
}

func TestFaultsFiveNodes(t *testing.T) {
	if testing.Short() && os.Getenv("LIMITD_CHAOS_ROUNDS") == "" {
		t.Skip("-short: the three-node fault test covers the same faults")
	}
	runFaults(t, 5, len(nemeses), 8, clustertest.SnapshotPolicy{Threshold: 64, Trailing: 16})
}

func runFaults(t *testing.T, size, shortRounds, clients int, snap clustertest.SnapshotPolicy) {
	rounds := chaosRounds(t, shortRounds)
	seed := chaosSeed(t)
	rng := rand.New(rand.NewSource(seed))
	began := time.Now()
	c := newFaultCluster(t, size, snap, seed)
	run := &faultRun{
		c:     c,
		keys:  newFaultKeys(stableWindow(time.Duration(rounds)*10*time.Second + 10*time.Minute)),
		start: time.Now(),
		specs: map[string]*algo.Spec{},
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var changes atomic.Int64
	first := leaderID(c)
	wg.Add(1)
	go func() { defer wg.Done(); leaderWatch(c, first, stop, &changes) }()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int, s int64) { defer wg.Done(); run.client(i, s, stop) }(i, rng.Int63())
	}
	stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopClients() // also when a round fails the test

	// Every fault appears once per len(nemeses) rounds, in a seeded order.
	order := rng.Perm(len(nemeses))
	for round := 0; round < rounds; round++ {
		nm := nemeses[order[round%len(nemeses)]]
		if round%len(nemeses) == len(nemeses)-1 {
			order = rng.Perm(len(nemeses))
		}
		undo := nm.do(t, c, rng)
		time.Sleep(time.Duration(300+rng.Intn(400)) * time.Millisecond)
		if undo != nil {
			undo()
		}
		c.WaitLeader(10 * time.Second)
		time.Sleep(time.Duration(100+rng.Intn(200)) * time.Millisecond)
		// Pause the clients and check that every replica reaches the same
		// state: a replica that diverged (say, replayed entries after a
		// restart) must be caught before a snapshot install overwrites it.
		run.gate.Lock()
		_, err := c.Converged(20 * time.Second)
		run.gate.Unlock()
		if err != nil {
			t.Fatalf("round %d (%s): %v", round, nm.name, err)
		}
		t.Logf("round %d: %s (leader changes so far %d)", round, nm.name, changes.Load())
	}
	stopClients()

	c.Heal()
	c.WaitLeader(10 * time.Second)
	if _, err := c.Converged(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The data before the peeks (the full digest includes LastTime, which
	// every check entry advances, peeks too).
	l, _ := c.Running(c.Leader())
	digest, err := l.FSM().DataDigest()
	if err != nil {
		t.Fatal(err)
	}

	// Final peeks, through every node in turn, once the cluster is whole: each
	// key's state must account for its acknowledged decisions.
	run.mu.Lock()
	keys := make([]string, 0, len(run.specs))
	for k := range run.specs {
		keys = append(keys, k)
	}
	run.mu.Unlock()
	sort.Strings(keys)
	final := map[string]int64{} // key → remaining
	const chunk = 200
	for from := 0; from < len(keys); from += chunk {
		part := keys[from:min(from+chunk, len(keys))]
		ops := make([]fsm.Op, len(part))
		for j, key := range part {
			ops[j] = fsm.Op{Checks: []fsm.Check{{Key: key, Spec: run.specs[key], Cost: 0}}}
		}
		call := run.now()
		var res []fsm.Result
		for tries := 0; ; tries++ {
			n, _ := c.Running((from / chunk) % size)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err = n.Check(ctx, ops)
			cancel()
			if err == nil {
				break
			}
			if tries == 20 {
				t.Fatalf("final peeks: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		ret := run.now()
		for j, key := range part {
			if len(res) != len(part) || res[j].Err != nil || len(res[j].Decisions) != 1 {
				t.Fatalf("final peek of %s: malformed result %+v", key, res)
			}
			out := limiterOutput{Outcome: outRefused, Remaining: res[j].Decisions[0].Remaining}
			if res[j].Allowed {
				out.Outcome = outAllowed
			}
			run.add(record{Client: clients, In: limiterInput{Key: key, Limit: run.specs[key].Limit}, Out: out, Call: call, Return: ret}, run.specs[key], key)
			final[key] = out.Remaining
		}
	}
	if _, err := c.Converged(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	l, _ = c.Running(c.Leader())
	if d, err := l.FSM().DataDigest(); err != nil {
		t.Fatal(err)
	} else if d != digest {
		t.Errorf("peeks changed the replicated state: data digest %s, then %s", digest, d)
	}

	sum := chaosSummary{Test: t.Name(), Nodes: size, Rounds: rounds, LeaderChanges: changes.Load(), Retries: run.retries}
	for _, r := range run.recs {
		if r.Client == clients {
			continue // the final peeks
		}
		sum.Ops++
		switch r.Out.Outcome {
		case outAllowed:
			sum.Allowed++
		case outRefused:
			sum.Refused++
		case outRefusedCached:
			sum.Refused++
			sum.Cached++
		case outUnknown:
			sum.Unknown++
		case outNotApplied:
			sum.NotApplied++
		}
	}

	tl := tally(run.recs)
	var detail []string
	sum.OverAdmissions, detail = overAdmissions(tl)
	for _, key := range keys {
		k := tl[key]
		used := k.Limit - final[key]
		if used < min(k.Allowed, k.Limit) {
			sum.LostAcks += min(k.Allowed, k.Limit) - used
			detail = append(detail, fmt.Sprintf("%s: state shows %d used, %d were acknowledged", key, used, k.Allowed))
		}
		if used > k.Allowed+k.Unknown {
			sum.Phantom += used - k.Allowed - k.Unknown
			detail = append(detail, fmt.Sprintf("%s: state shows %d used, only %d acknowledged + %d unknown", key, used, k.Allowed, k.Unknown))
		}
	}
	res := linearizable(t, run.recs, time.Minute)
	sum.Linearizable = string(res)
	sum.Seconds = time.Since(began).Seconds()
	line, _ := json.Marshal(sum)
	t.Logf("CHAOS-SUMMARY %s", line)

	if sum.Ops < 10*rounds {
		t.Errorf("only %d operations in %d rounds: the clients were starved, the run proves little", sum.Ops, rounds)
	}
	if sum.Allowed == 0 || sum.Refused == 0 {
		t.Errorf("allowed %d, refused %d: the run must exercise both", sum.Allowed, sum.Refused)
	}
	for i, d := range detail {
		if i == 20 {
			t.Errorf("... and %d more", len(detail)-i)
			break
		}
		t.Error(d)
	}
	if len(run.oddErrs) > 0 {
		t.Errorf("%d checks failed with errors outside the contract (want cluster.ErrNoLeader or cluster.ErrOutcomeUnknown), e.g. %s", len(run.oddErrs), run.oddErrs[0])
	}
	switch res {
	case porcupine.Illegal:
		t.Error("porcupine: the history is not linearizable against the limiter model")
	case porcupine.Unknown:
		t.Log("porcupine: the check timed out; no violation found in the time given")
	}
}
