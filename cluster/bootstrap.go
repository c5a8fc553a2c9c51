package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster/forward"
	"github.com/limitd/limitd/fsm"
)

// Start-up: how a node becomes a member of a cluster.
//
//   - Without join addresses, a fresh node bootstraps a single-node cluster
//     (Open with bootstrap true); a node with a data directory resumes.
//   - With join addresses (JoinCluster), a node never bootstraps alone. It
//     asks the members it can reach to add it, retrying with capped
//     exponential backoff. With BootstrapExpect N it first discovers the
//     nodes behind the addresses (GET /internal/v1/bootstrap): once N nodes
//     without Raft state see each other (every one of them reports seeing
//     all N), the one with the lowest node ID bootstraps the cluster with all
//     N as voters, as Consul's -bootstrap-expect does; the others then join
//     it, which registers their HTTP addresses. As soon as any of them has
//     Raft state, everyone else joins instead.
//   - A node with Raft state (an existing data directory) never bootstraps
//     again.

// Join defaults and bounds.
const (
	// DefaultJoinTimeout is how long a fresh node retries joining before
	// JoinCluster gives up (limitd serve exits, and its supervisor restarts it).
	DefaultJoinTimeout = 5 * time.Minute
	// joinBackoffMin and JoinBackoffMax bound the wait between join rounds;
	// it doubles each round, with jitter.
	joinBackoffMin = 200 * time.Millisecond
	JoinBackoffMax = 5 * time.Second
	// joinReportEvery rate-limits "still waiting" lines.
	joinReportEvery = 30 * time.Second
	// maxJoinAddrs bounds the addresses a join list (after DNS) may name.
	maxJoinAddrs = 64

	pathBootstrap = forward.PathBootstrap
)

// JoinOptions says how JoinCluster finds the cluster.
type JoinOptions struct {
	// Addrs are members' HTTP addresses: "host:port" or a URL. A host name
	// stands for every address it resolves to (a Kubernetes headless
	// service), looked up again every round.
	Addrs []string
	// BootstrapExpect, when above 0, is the number of nodes (this one
	// included) that bootstrap a new cluster together; 0 only joins.
	BootstrapExpect int
	// Timeout bounds the attempts of a node without Raft state (0: none). A
	// node with state retries until ctx ends: it is a member already.
	Timeout time.Duration
}

// bootstrapInfo is GET /internal/v1/bootstrap: who this node is and what it sees.
type bootstrapInfo struct {
	ID       string   `json:"id"`
	RaftAddr string   `json:"raft_addr"`
	HTTPAddr string   `json:"http_addr"`
	HasState bool     `json:"has_state"`
	Expect   int      `json:"expect"`
	Seen     []string `json:"seen"` // node IDs without state seen in the last round
	// Incarnation is the data directory's id and Admitted whether it may
	// vote (vote.go); Applied is the state machine's applied index, which
	// the leader watches while a re-added member catches up (admit.go).
	Incarnation string `json:"incarnation,omitempty"`
	Admitted    bool   `json:"admitted,omitempty"`
	Applied     uint64 `json:"applied_index,omitempty"`
}

// discovery is how a node becomes a member (JoinCluster) and the bootstrap
// state it serves to its peers (GET /internal/v1/bootstrap). It owns that
// job's state; the rest it reads from the node's Raft, state machine,
// admission and peer client, set once in Open.
type discovery struct {
	mu     sync.Mutex
	expect int
	seen   []string

	self, httpAddr string
	hadState       bool // Raft state existed when the node opened
	raft           *raft.Raft
	trans          raft.Transport
	fsm            *fsm.FSM
	adm            *admission
	promo          *promotions // the incarnations to record after a bootstrap (admit.go)
	peers          *peerClient
	member         func() bool // in the latest configuration (Node.membership)
	log            *slog.Logger
	closing        <-chan struct{}
}

// hasState reports whether this node has Raft state: it bootstrapped, was
// replicated to, or started from an existing data directory.
func (d *discovery) hasState() bool {
	if d.raft.LastIndex() > 0 {
		return true
	}
	f := d.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

func (d *discovery) selfInfo() bootstrapInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	return bootstrapInfo{
		ID: d.self, RaftAddr: string(d.trans.LocalAddr()), HTTPAddr: d.httpAddr,
		HasState: d.hasState(), Expect: d.expect, Seen: slices.Clone(d.seen),
		Incarnation: d.adm.id, Admitted: d.adm.mayVote(), Applied: d.fsm.AppliedIndex(),
	}
}

func (d *discovery) handleBootstrap(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(d.selfInfo())
}

// JoinCluster makes this node a member through the nodes at opts.Addrs (see
// the start-up notes above). It returns nil once this node joined (or
// bootstrapped the cluster with its peers, or found itself already a
// member); an error when a member refused it for good (credentials, a bad
// request), when opts.Timeout passed without success, or when ctx ended.
func (n *Node) JoinCluster(ctx context.Context, opts JoinOptions) error {
	return n.disc.join(ctx, opts)
}

func (d *discovery) join(ctx context.Context, opts JoinOptions) error {
	if len(opts.Addrs) == 0 {
		return errors.New("join: no addresses")
	}
	if !d.hadState && opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	if d.hadState && d.registered() {
		d.log.Info("already a member: not joining again", "join", opts.Addrs)
		return nil
	}
	expect := opts.BootstrapExpect
	if d.hadState {
		expect = 0 // a node with state never bootstraps again
	}
	d.mu.Lock()
	d.expect = expect
	d.mu.Unlock()

	backoff := joinBackoffMin
	var lastReport time.Time
	var last error
	for round := 1; ; round++ {
		targets, err := d.peers.resolveJoin(ctx, opts.Addrs)
		if err != nil {
			last = err
		}
		joinNow := expect == 0 || d.hasState()
		if !joinNow && len(targets) > 0 {
			peers := d.discover(ctx, targets)
			switch done, why := d.tryBootstrap(peers, expect); {
			case done:
				return nil
			case why == errClusterExists:
				joinNow = true
			default:
				last = why
			}
		}
		if joinNow && len(targets) > 0 {
			b, _ := json.Marshal(forward.JoinRequest{ID: d.self, RaftAddr: string(d.trans.LocalAddr()), HTTPAddr: d.httpAddr})
			err := d.peers.joinAny(ctx, targets, b)
			if err == nil {
				d.log.Info("joined the cluster", "rounds", round)
				if !d.adm.mayVote() {
					// watchAdmission (vote.go) asks again until a leader admits it.
					d.log.Info("joined as a new incarnation: this node does not vote until a leader has caught it up", "incarnation", d.adm.id)
				}
				return nil
			}
			var perm *permanentError
			if errors.As(err, &perm) {
				return perm.err
			}
			last = err
		}
		if round == 1 || time.Since(lastReport) >= joinReportEvery {
			lastReport = time.Now()
			d.log.Info("waiting to join the cluster; retrying", "join", opts.Addrs, "expect", expect, "round", round, "last_error", errString(last))
		}
		wait := jitter(backoff)
		backoff = nextBackoff(backoff)
		select {
		case <-ctx.Done():
			return fmt.Errorf("join %s: %w (last error: %v)", strings.Join(opts.Addrs, ","), ctx.Err(), last)
		case <-d.closing:
			return fmt.Errorf("join %s: node closed", strings.Join(opts.Addrs, ","))
		case <-time.After(wait):
		}
	}
}

// nextBackoff doubles the wait between join rounds up to JoinBackoffMax.
func nextBackoff(d time.Duration) time.Duration { return min(2*d, JoinBackoffMax) }

// jitter is a random wait in [d/2, d], so nodes started together spread out.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// registered reports whether this node is in the configuration with its
// current HTTP address in the node table (nothing for a join to change).
func (d *discovery) registered() bool {
	nodes := d.fsm.Nodes()
	return d.member() && nodes[d.self] == d.httpAddr && d.adm.mayVote()
}

// joinURL parses one join address: "host:port" or scheme://host:port.
func joinURL(a, scheme string) (*url.URL, error) {
	if !strings.Contains(a, "://") {
		a = scheme + "://" + a
	}
	u, err := url.Parse(strings.TrimRight(a, "/"))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("join address %q: want host:port or http(s)://host:port", a)
	}
	u.Path = ""
	return u, nil
}

// permanentError: retrying cannot help (a member refused the credentials or
// the request, or the join list is malformed).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }

// errClusterExists: a discovered node has Raft state, so join it.
var errClusterExists = errors.New("a cluster exists")

// discover asks every target who it is. The result includes this node and
// is deduplicated by ID; targets that do not answer are left out.
func (d *discovery) discover(ctx context.Context, targets []string) []bootstrapInfo {
	self := d.selfInfo()
	byID := map[string]bootstrapInfo{self.ID: self}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var info bootstrapInfo
			if err := d.peers.getJSON(ctx, t+pathBootstrap, &info); err != nil || info.ID == "" {
				return
			}
			mu.Lock()
			if _, ok := byID[info.ID]; !ok {
				byID[info.ID] = info
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	peers := make([]bootstrapInfo, 0, len(byID))
	for _, p := range byID {
		peers = append(peers, p)
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].ID < peers[j].ID })
	ids := make([]string, 0, len(peers))
	for _, p := range peers {
		if !p.HasState {
			ids = append(ids, p.ID)
		}
	}
	d.mu.Lock()
	d.seen = ids
	d.mu.Unlock()
	return peers
}

// tryBootstrap bootstraps the cluster if peers (sorted by ID, this node
// included) are exactly expect nodes without state that all see each other
// and this node has the lowest ID. done: this node bootstrapped. Otherwise
// why says what is missing (errClusterExists: join instead).
func (d *discovery) tryBootstrap(peers []bootstrapInfo, expect int) (done bool, why error) {
	ids := make([]string, 0, len(peers))
	var bootstrappers []bootstrapInfo
	for _, p := range peers {
		if p.HasState {
			return false, errClusterExists
		}
		if p.Expect == 0 {
			continue // a node that only joins waits for the cluster too
		}
		ids = append(ids, p.ID)
		bootstrappers = append(bootstrappers, p)
	}
	peers = bootstrappers
	if len(peers) < expect {
		return false, fmt.Errorf("bootstrap: %d of %d expected nodes seen (%s)", len(peers), expect, strings.Join(ids, ", "))
	}
	if len(peers) > expect {
		err := fmt.Errorf("bootstrap: %d nodes without state seen (%s) but --bootstrap-expect is %d: every initial server must be given the same, correct count", len(peers), strings.Join(ids, ", "), expect)
		d.log.Error("not bootstrapping", "error", err)
		return false, err
	}
	for _, p := range peers {
		if p.Expect != expect {
			err := fmt.Errorf("bootstrap: node %s expects %d nodes, this one %d: every initial server must be given the same --bootstrap-expect", p.ID, p.Expect, expect)
			if p.Expect > 0 {
				d.log.Error("not bootstrapping", "error", err)
			}
			return false, err
		}
		if p.ID == d.self {
			continue // this node's own view is ids
		}
		for _, id := range ids {
			if !slices.Contains(p.Seen, id) {
				return false, fmt.Errorf("bootstrap: node %s does not see %s yet", p.ID, id)
			}
		}
	}
	// Every one of the expected nodes is new and sees the others: there is
	// no past to lose, so each may vote in the first election.
	d.adm.admit("bootstrapping a new cluster with --bootstrap-expect")
	if ids[0] != d.self {
		return false, fmt.Errorf("bootstrap: %d nodes see each other; waiting for %s (lowest node ID) to bootstrap", expect, ids[0])
	}
	// A peer that has not yet agreed (admitted itself) may not have seen what
	// this node saw; were the cluster made now, it would find it made, join
	// unadmitted, and be demoted as a wiped data directory although it never
	// had a past. Bootstrap once every peer with an incarnation has agreed.
	for _, p := range peers {
		if p.ID != d.self && p.Incarnation != "" && !p.Admitted {
			return false, fmt.Errorf("bootstrap: %d nodes see each other; waiting for %s to agree", expect, p.ID)
		}
	}
	conf := raft.Configuration{}
	incs := map[string]string{}
	for _, p := range peers {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: raft.Voter})
		if p.Incarnation != "" && p.ID != d.self {
			incs[p.ID] = p.Incarnation
		}
	}
	if err := d.raft.BootstrapCluster(conf).Error(); err != nil {
		if errors.Is(err, raft.ErrCantBootstrap) {
			return false, errClusterExists
		}
		return false, fmt.Errorf("bootstrap cluster: %w", err)
	}
	d.log.Info("bootstrapped the cluster", "voters", ids)
	// The first leader records the peers' incarnations (admit.go), so they
	// are admitted without a round of demotion when they join.
	d.promo.mu.Lock()
	d.promo.bootIncs = incs
	d.promo.mu.Unlock()
	return true, nil
}

// peerReportEvery rate-limits "still unreachable" lines about a peer.
const peerReportEvery = 30 * time.Second

// watchPeers reports, on the leader, a peer that stopped answering (see
// peerReports). Raft itself logs every failed attempt; raftLevel lowers
// those to Debug.
func watchPeers(r *raft.Raft, self string, log *slog.Logger, closing <-chan struct{}) {
	ch := make(chan raft.Observation, 64)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(obs)
	defer r.DeregisterObserver(obs)
	rep := peerReports{log: log, every: peerReportEvery}
	for {
		select {
		case <-closing:
			return
		case o := <-ch:
			switch d := o.Data.(type) {
			case raft.LeaderObservation:
				if d.LeaderID == raft.ServerID(self) {
					rep.reset() // leading anew: replication starts afresh
				}
			case raft.FailedHeartbeatObservation:
				rep.failed(string(d.PeerID), time.Now())
			case raft.ResumedHeartbeatObservation:
				rep.resumed(string(d.PeerID), time.Now())
			}
		}
	}
}

// peerReports turns Raft's per-heartbeat failures into a few lines: a peer
// going down once at Warn, then at most every `every` at Info while it stays
// down, and once at Info when it answers again.
type peerReports struct {
	log   *slog.Logger
	every time.Duration
	down  map[string]*peerDown
}

type peerDown struct{ since, reported time.Time }

func (r *peerReports) reset() { clear(r.down) }

func (r *peerReports) failed(peer string, now time.Time) {
	if r.down == nil {
		r.down = map[string]*peerDown{}
	}
	p := r.down[peer]
	switch {
	case p == nil:
		r.down[peer] = &peerDown{since: now, reported: now}
		r.log.Warn("peer unreachable", "peer", peer)
	case now.Sub(p.reported) >= r.every:
		p.reported = now
		r.log.Info("peer still unreachable", "peer", peer, "down_for", now.Sub(p.since).Round(time.Second).String())
	}
}

func (r *peerReports) resumed(peer string, now time.Time) {
	if p := r.down[peer]; p != nil {
		delete(r.down, peer)
		r.log.Info("peer reachable again", "peer", peer, "down_for", now.Sub(p.since).Round(time.Second).String())
	}
}
