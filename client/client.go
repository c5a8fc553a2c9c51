package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults. Each option's doc names the default it replaces.
const (
	// DefaultTimeout bounds a call whose context has no deadline.
	DefaultTimeout = 10 * time.Second
	// DefaultRefreshInterval: how often the client re-learns the leader while
	// everything works (a leader change is also noticed at the first error).
	DefaultRefreshInterval = 5 * time.Second
	// DefaultMaxBatch is the most checks coalesced into one /v1/check/batch
	// request (the server accepts up to 1,000 by default).
	DefaultMaxBatch = 256
	// DefaultMaxInflight is how many coalesced batches may be in flight at once;
	// checks arriving meanwhile wait and form the next batch.
	DefaultMaxInflight = 2
	// DefaultMaxIdleConnsPerHost sizes the transport's idle pool per node.
	DefaultMaxIdleConnsPerHost = 64

	// failedHostPause: how long a node that failed is not made the target again.
	failedHostPause = time.Second

	retryBackoffMin = 10 * time.Millisecond
	retryBackoffMax = 250 * time.Millisecond
	// maxResponseBytes bounds what the client reads from a node.
	maxResponseBytes = 64 << 20
)

// FailMode says what Check answers when the cluster cannot decide before
// the deadline (errors matching ErrUnavailable). A configuration error
// (ErrConfig: an untrusted certificate, a wrong scheme or host) is always
// returned: failing open or closed would hide a deploy mistake.
type FailMode int

const (
	// FailError returns the error (the default).
	FailError FailMode = iota
	// FailOpen allows: Decision{Allowed: true, Degraded: true}, nil error.
	FailOpen
	// FailClosed refuses: Decision{Allowed: false, Degraded: true,
	// RetryAfter: 1s}, nil error.
	FailClosed
)

// Coalescing configures the merging of concurrent Check calls into
// /v1/check/batch requests.
type Coalescing struct {
	// Disabled sends every Check as its own /v1/check request.
	Disabled bool
	// MaxBatch bounds the checks in one request (default DefaultMaxBatch).
	MaxBatch int
	// MaxInflight bounds the batches in flight at once (default DefaultMaxInflight).
	MaxInflight int
	// MaxWait is how long a batch that is not full waits for more checks
	// before it is sent (default 0: natural batching, a batch is whatever
	// arrived while the previous ones were in flight). It bounds the added
	// latency of a check.
	MaxWait time.Duration
}

type options struct {
	tlsConfig   *tls.Config
	httpClient  *http.Client
	token       string
	timeout     time.Duration
	refresh     time.Duration
	coalesce    Coalescing
	failMode    FailMode
	noRequestID bool
	breaker     Breaker
	local       *localShare // FailLocal's limits and counts (degraded.go)
	// noSlotRouting: WithoutSlotRouting (route.go).
	noSlotRouting bool
}

// Option configures a Client.
type Option func(*options)

// WithTLS talks HTTPS with cfg (nil: the system roots). Addresses given as
// https://host:port select HTTPS too.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		o.tlsConfig = cfg
	}
}

// WithToken sends "Authorization: Bearer token" on admin calls (policy
// writes, key reset, membership, snapshots).
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithHTTPClient replaces the tuned client the package builds (its
// Transport's TLS settings then win over WithTLS).
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.httpClient = hc } }

// WithTimeout bounds calls whose context has no deadline (default DefaultTimeout).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithRefreshInterval sets how often the leader is re-learned while nothing
// fails (default DefaultRefreshInterval).
func WithRefreshInterval(d time.Duration) Option { return func(o *options) { o.refresh = d } }

// WithCoalescing configures (or, with Disabled, turns off) the merging of
// concurrent checks; on by default.
func WithCoalescing(c Coalescing) Option { return func(o *options) { o.coalesce = c } }

// WithFailMode chooses what Check answers when the cluster is unavailable
// (default FailError). Stats counts how often it happened.
func WithFailMode(m FailMode) Option { return func(o *options) { o.failMode = m } }

// WithoutRequestIDs stops the client from generating a request_id for checks
// that carry none. Each id costs the cluster a stored entry for its
// retention (10 minutes by default); without one, a check whose outcome is
// unknown is not retried (it could count twice) and fails with
// ErrOutcomeUnknown.
func WithoutRequestIDs() Option { return func(o *options) { o.noRequestID = true } }

// Stats are the client's counters since New.
type Stats struct {
	Checks  uint64 // Check calls answered (by the cluster or the fail mode)
	Batches uint64 // coalesced /v1/check/batch requests sent, retries included
	// PairBatches are coalesced /v1/release/batch, /v1/renew/batch and
	// /v1/settle/batch requests sent, retries included (costbatch.go).
	PairBatches uint64
	Retries     uint64 // attempts repeated after an unavailable or unknown outcome
	FailedOpen  uint64 // checks allowed by FailOpen
	// FailedClosed: checks refused by FailClosed.
	FailedClosed uint64
	// LeaderChanges: times the client switched the node it sends to.
	LeaderChanges uint64
	// ShortCircuited: requests the open breaker answered without trying
	// the network (see Breaker; a coalesced batch counts once); the checks
	// among them are also in FailedOpen or FailedClosed when a fail mode
	// answered them.
	ShortCircuited uint64
}

// Client talks to a limitd cluster. It is safe for concurrent use; share one
// per process. Close releases its idle connections.
type Client struct {
	opts   options
	hc     *http.Client
	scheme string

	mu        sync.Mutex
	endpoints []string // configured addresses, then members learned from the cluster
	next      int      // round-robin position when the leader is unknown
	// failed holds nodes that just failed, until when they are not made the
	// target again (a leader whose advertised address this client cannot
	// reach must not capture every retry).
	failed map[string]time.Time

	target      atomic.Pointer[string] // the node requests go to (the leader when known)
	lastLearn   atomic.Int64           // unix nanos of the last successful discovery
	discovering atomic.Bool

	idPrefix string
	idSeq    atomic.Uint64

	co *coalescer
	rt *router      // per group leader (route.go); nil WithoutSlotRouting
	pb pairBatchers // costbatch.go
	br *breaker

	pairBatches                                                                       atomic.Uint64
	checks, batches, retries, failedOpen, failedClosed, leaderChanges, shortCircuited atomic.Uint64
}

// New returns a client for the nodes at addrs ("host:port", "http://host:port"
// or "https://host:port"). It does not connect: the first call learns the
// leader from GET /v1/cluster and sends to it.
func New(addrs []string, opts ...Option) (*Client, error) {
	o := options{timeout: DefaultTimeout, refresh: DefaultRefreshInterval}
	for _, opt := range opts {
		opt(&o)
	}
	if o.timeout <= 0 {
		o.timeout = DefaultTimeout
	}
	if o.refresh <= 0 {
		o.refresh = DefaultRefreshInterval
	}
	if o.coalesce.MaxBatch <= 0 {
		o.coalesce.MaxBatch = DefaultMaxBatch
	}
	if o.coalesce.MaxInflight <= 0 {
		o.coalesce.MaxInflight = DefaultMaxInflight
	}
	c := &Client{opts: o, scheme: "http"}
	if o.tlsConfig != nil {
		c.scheme = "https"
	}
	for _, a := range addrs {
		for _, a := range strings.Split(a, ",") {
			a = strings.TrimSpace(a)
			if a == "" {
				continue
			}
			host, scheme, err := parseAddr(a)
			if err != nil {
				return nil, err
			}
			if scheme == "https" {
				c.scheme = "https"
			}
			c.addEndpointLocked(host)
		}
	}
	if len(c.endpoints) == 0 {
		return nil, errors.New("limitd: no address given")
	}
	c.hc = o.httpClient
	if c.hc == nil {
		tlsCfg := o.tlsConfig
		if tlsCfg == nil && c.scheme == "https" {
			tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		c.hc = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // loopback and cluster-internal traffic: never through a proxy
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     tlsCfg,
			MaxIdleConns:        4 * DefaultMaxIdleConnsPerHost,
			MaxIdleConnsPerHost: DefaultMaxIdleConnsPerHost,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
		}}
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("limitd: request id prefix: %w", err)
	}
	c.idPrefix = hex.EncodeToString(b[:]) + "-"
	c.co = newCoalescer(c, o.coalesce)
	if !o.noSlotRouting {
		c.rt = newRouter(c)
	}
	c.pb = newPairBatchers(c)
	c.br = newBreaker(o.breaker)
	return c, nil
}

// parseAddr splits "scheme://host:port" into host:port and the scheme.
func parseAddr(a string) (host, scheme string, err error) {
	if strings.Contains(a, "://") {
		u, err := url.Parse(a)
		if err != nil {
			return "", "", fmt.Errorf("limitd: address %q: %w", a, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", "", fmt.Errorf("limitd: address %q: scheme must be http or https", a)
		}
		a, scheme = u.Host, u.Scheme
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		return "", "", fmt.Errorf("limitd: address %q: want host:port", a)
	}
	return a, scheme, nil
}

func (c *Client) addEndpointLocked(host string) {
	for _, e := range c.endpoints {
		if e == host {
			return
		}
	}
	c.endpoints = append(c.endpoints, host)
}

// Close releases idle connections. Calls in progress finish.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{
		Checks: c.checks.Load(), Batches: c.batches.Load(), PairBatches: c.pairBatches.Load(), Retries: c.retries.Load(),
		FailedOpen: c.failedOpen.Load(), FailedClosed: c.failedClosed.Load(),
		LeaderChanges: c.leaderChanges.Load(), ShortCircuited: c.shortCircuited.Load(),
	}
}

// Target is the node the client sends to now: the leader once learned.
func (c *Client) Target() string { return c.pick() }

// newRequestID returns a unique id: a random per-client prefix and a counter.
func (c *Client) newRequestID(dst []byte) []byte {
	dst = append(dst, c.idPrefix...)
	return strconv.AppendUint(dst, c.idSeq.Add(1), 36)
}

// pick returns the node to send to: the leader when known, else the next
// endpoint in turn. It starts a background refresh when the leader is stale.
func (c *Client) pick() string {
	if t := c.target.Load(); t != nil {
		if time.Now().UnixNano()-c.lastLearn.Load() > int64(c.opts.refresh) {
			c.learnAsync()
		}
		return *t
	}
	c.learnAsync()
	c.mu.Lock()
	e := c.endpoints[c.next%len(c.endpoints)]
	c.mu.Unlock()
	return e
}

// everyNodeMisconfigured returns the first ConfigError of a learnLeader
// failure in which every node failed with one, or nil.
func everyNodeMisconfigured(err error) *ConfigError {
	var te *transportError
	if !errors.As(err, &te) {
		return nil
	}
	joined, ok := errors.Unwrap(te.err).(interface{ Unwrap() []error })
	if !ok {
		return nil
	}
	var first *ConfigError
	for _, e := range joined.Unwrap() {
		var ce *ConfigError
		if !errors.As(e, &ce) {
			return nil
		}
		if first == nil {
			first = ce
		}
	}
	return first
}

// endpointCount is the number of nodes the client knows.
func (c *Client) endpointCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.endpoints)
}

// demote forgets host as the target after it failed, so the next attempt goes
// to another node until the leader is learned again.
func (c *Client) demote(host string) {
	if t := c.target.Load(); t != nil && *t == host {
		c.target.CompareAndSwap(t, nil)
	}
	c.mu.Lock()
	if c.endpoints[c.next%len(c.endpoints)] == host {
		c.next++
	}
	if c.failed == nil {
		c.failed = map[string]time.Time{}
	}
	c.failed[host] = time.Now().Add(failedHostPause)
	c.mu.Unlock()
}

func (c *Client) setTarget(host string) {
	if old := c.target.Swap(&host); old == nil || *old != host {
		c.leaderChanges.Add(1)
	}
}

func (c *Client) learnAsync() {
	if !c.discovering.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.discovering.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = c.learnLeader(ctx)
	}()
}

// learnLeader is the one place the client discovers the leader: it asks the
// known nodes, the current target first, for GET /v1/cluster and takes the
// first answer that names the leader's HTTP address (leader_http_addr). It
// also learns the members' HTTP addresses, so that failover can reach nodes
// that were not configured. On success the leader becomes the target.
func (c *Client) learnLeader(ctx context.Context) (string, error) {
	c.mu.Lock()
	order := make([]string, 0, len(c.endpoints)+1)
	if t := c.target.Load(); t != nil {
		order = append(order, *t)
	}
	for i := range c.endpoints {
		order = append(order, c.endpoints[(c.next+i)%len(c.endpoints)])
	}
	c.mu.Unlock()
	var errs []error
	seen := map[string]bool{}
	for _, host := range order {
		if seen[host] {
			continue
		}
		seen[host] = true
		var st ClusterStatus
		if err := c.getJSON(ctx, host, "/v1/cluster", false, &st); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		c.mu.Lock()
		for _, m := range st.Members {
			if m.HTTPAddr != "" {
				c.addEndpointLocked(m.HTTPAddr)
			}
		}
		c.mu.Unlock()
		if st.LeaderHTTPAddr == "" {
			errs = append(errs, fmt.Errorf("%s: no leader known", host))
			continue
		}
		c.mu.Lock()
		until, bad := c.failed[st.LeaderHTTPAddr]
		if bad && time.Now().After(until) {
			delete(c.failed, st.LeaderHTTPAddr)
			bad = false
		}
		c.mu.Unlock()
		if bad {
			// Still named leader but it just failed for us: go round the
			// other nodes (they forward) until the pause ends.
			errs = append(errs, fmt.Errorf("%s: leader %s failed recently", host, st.LeaderHTTPAddr))
			continue
		}
		c.setTarget(st.LeaderHTTPAddr)
		c.lastLearn.Store(time.Now().UnixNano())
		return st.LeaderHTTPAddr, nil
	}
	return "", &transportError{addr: "cluster", err: fmt.Errorf("no node named a leader: %w", errors.Join(errs...))}
}

// withDeadline applies the default timeout to a context without a deadline.
func (c *Client) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.opts.timeout)
}

// retry runs attempt against the current target until it succeeds, fails
// with an error that a retry cannot fix, or ctx ends. Between attempts it
// backs off and re-learns the leader. unknownOK says a retry is safe even
// after an attempt that may have been applied (the request carries a
// request_id, or is idempotent).
//
// An attempt that could not connect sent nothing: the call fails over to
// the next known node at once, and ends at once when every known node
// failed to connect (the breaker counts it; see Breaker). ctx is passed to
// attempt because a probe of the open breaker runs under a shorter one.
func (c *Client) retry(ctx context.Context, unknownOK bool, attempt func(ctx context.Context, host string) error) (err error) {
	return c.retryAt(ctx, "", unknownOK, attempt)
}

// retryAt is retry whose attempts go to prefer (a key's group leader,
// route.go) while it has not failed, and otherwise where retry's go.
func (c *Client) retryAt(ctx context.Context, prefer string, unknownOK bool, attempt func(ctx context.Context, host string) error) (err error) {
	probe, err := c.br.admit()
	if err != nil {
		c.shortCircuited.Add(1)
		return err
	}
	if probe {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.br.cfg.ProbeTimeout)
		defer cancel()
	}
	// answered: some node gave an HTTP answer; transport: some attempt got
	// none. Only a call with the second and not the first counts against
	// the breaker (a configuration error counts as neither).
	answered, transport := false, false
	defer func() {
		switch {
		case answered:
			c.br.answered()
		case transport:
			c.br.failed(err)
		}
	}()
	backoff := retryBackoffMin
	unknown := false
	var misconfigured map[string]bool
	var unreached []string
	var unreachedErrs []error
	for {
		host := c.pickFor(prefer, unreached)
		err := attempt(ctx, host)
		var ce *ConfigError
		if errors.As(err, &ce) {
			// Not worth a retry on this node; another configured node may
			// be set up differently (its certificate, its scheme).
			if misconfigured[host] {
				return err // back at a node already tried: none left to try
			}
			if misconfigured == nil {
				misconfigured = map[string]bool{}
			}
			misconfigured[host] = true
			c.demote(host)
			if len(misconfigured) >= c.endpointCount() || ctx.Err() != nil {
				return err
			}
			continue
		}
		var te *transportError
		switch {
		case err == nil, isAnswer(err):
			answered = true
		case errors.As(err, &te):
			// A request the caller's deadline cut short after it was sent
			// is a slow node, not an unreachable one: it does not count.
			if notConnected(err) || ctx.Err() == nil {
				transport = true
			}
		}
		if err == nil || !retryable(err) {
			return err
		}
		if mayHaveCounted(err) {
			unknown = true
			if !unknownOK {
				return err
			}
		}
		c.demote(host)
		if host == prefer {
			c.rt.invalidate() // the group's leader may have moved
		}
		if ctx.Err() != nil {
			return &deadlineError{ctxErr: ctx.Err(), last: err, unknown: unknown}
		}
		if notConnected(err) && !slices.Contains(unreached, host) {
			unreached = append(unreached, host)
			unreachedErrs = append(unreachedErrs, err)
			if len(unreached) < c.endpointCount() {
				continue // fail over at once: nothing was sent
			}
			if !answered {
				return &unreachableError{addrs: unreached, errs: unreachedErrs, unknown: unknown}
			}
			// Some node answered earlier in this call (a 503 during an
			// election, say): keep retrying as before, every node again.
			unreached, unreachedErrs = unreached[:0], unreachedErrs[:0]
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return &deadlineError{ctxErr: ctx.Err(), last: err, unknown: unknown}
		case <-t.C:
		}
		if backoff *= 2; backoff > retryBackoffMax {
			backoff = retryBackoffMax
		}
		c.retries.Add(1)
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		_, lerr := c.learnLeader(lctx)
		cancel()
		if ce := everyNodeMisconfigured(lerr); ce != nil {
			// The failure was ambiguous (a plain-HTTP request to an HTTPS
			// node can end in EOF), but asking every node for the leader
			// says what is wrong: stop retrying.
			return ce
		}
	}
}

// isAnswer reports an error that is a node's HTTP answer.
func isAnswer(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// pickFor is prefer unless it refused this call's connections or failed
// recently (then pickAvoiding).
func (c *Client) pickFor(prefer string, skip []string) string {
	if prefer != "" && !slices.Contains(skip, prefer) {
		c.mu.Lock()
		until, bad := c.failed[prefer]
		c.mu.Unlock()
		if !bad || time.Now().After(until) {
			return prefer
		}
	}
	return c.pickAvoiding(skip)
}

// pickAvoiding is pick, but never one of skip while a node outside it is
// known: the nodes that refused this call's connections.
func (c *Client) pickAvoiding(skip []string) string {
	h := c.pick()
	if len(skip) == 0 || !slices.Contains(skip, h) {
		return h
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.endpoints {
		if e := c.endpoints[(c.next+i)%len(c.endpoints)]; !slices.Contains(skip, e) {
			return e
		}
	}
	return h
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > 1<<16 {
		return // keep huge batch buffers from pinning memory
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

var jsonContentType = []string{"application/json"}

// send does one HTTP request to host and reads the answer into *dst. A
// non-2xx answer is returned as *Error; no answer as *transportError.
func (c *Client) send(ctx context.Context, method, host, path string, body []byte, admin bool, dst *[]byte) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+host+path, rd)
	if err != nil {
		return nil, fmt.Errorf("limitd: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header["Content-Type"] = jsonContentType
	}
	if admin && c.opts.token != "" {
		req.Header["Authorization"] = []string{"Bearer " + c.opts.token}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if kind := configKind(err); kind != "" {
			return nil, &ConfigError{Addr: host, Kind: kind, Err: unwrapURL(err)}
		}
		return nil, &transportError{addr: host, sent: sentMaybe(err), err: err}
	}
	defer resp.Body.Close()
	b := (*dst)[:0]
	b, err = readAll(b, io.LimitReader(resp.Body, maxResponseBytes))
	*dst = b
	if err != nil {
		return nil, &transportError{addr: host, sent: true, err: fmt.Errorf("read answer: %w", err)}
	}
	if v := resp.Header["Limitd-Leader"]; len(v) == 1 && v[0] != host {
		c.followLeader(v[0]) // a follower answered: go to the leader next time
	}
	if v := resp.Header[HeaderSlotEpoch]; len(v) == 1 {
		c.rt.sawEpoch(v[0])
	}
	if resp.StatusCode/100 != 2 {
		if resp.StatusCode == http.StatusBadRequest && bytes.Contains(b, []byte(tlsRequiredBody)) {
			return resp.Header, &ConfigError{Addr: host, Kind: ConfigTLSRequired, Err: errors.New(strings.TrimSpace(string(b)))}
		}
		return resp.Header, decodeError(resp, b)
	}
	return resp.Header, nil
}

// unwrapURL drops net/http's "Post URL:" wrapper, which names a path the
// caller did not ask for.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// followLeader makes addr, named by a follower's Limitd-Leader header, the
// target: later requests skip the follower's forwarding hop. A leader that
// failed for us recently is not taken until its pause ends.
func (c *Client) followLeader(addr string) {
	c.mu.Lock()
	c.addEndpointLocked(addr)
	until, bad := c.failed[addr]
	c.mu.Unlock()
	if bad && time.Now().Before(until) {
		return
	}
	c.setTarget(addr)
	c.lastLearn.Store(time.Now().UnixNano())
}

// sentMaybe: a failure to connect means the request was never sent; anything
// later may have reached the node.
func sentMaybe(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var cv *tls.CertificateVerificationError
	return !errors.As(err, &cv) // a handshake that failed sent no request
}

func readAll(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

func decodeError(resp *http.Response, body []byte) error {
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &Error{Status: resp.StatusCode}
	if json.Unmarshal(body, &env) == nil && env.Error.Code != "" {
		e.Code, e.Field, e.Message = env.Error.Code, env.Error.Field, env.Error.Message
	} else {
		// Not limitd's error body (a proxy, a load balancer): keep the status.
		e.Code = CodeInternal
		if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout {
			e.Code = CodeUnavailable
		}
		e.Message = fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, bytes.TrimSpace(body))
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// getJSON GETs path from host (no leader routing, no retries); admin sends
// the token, when the client has one, for the views a token unlocks.
func (c *Client) getJSON(ctx context.Context, host, path string, admin bool, v any) error {
	buf := getBuf()
	defer putBuf(buf)
	if _, err := c.send(ctx, http.MethodGet, host, path, nil, admin, buf); err != nil {
		return err
	}
	if err := json.Unmarshal(*buf, v); err != nil {
		return fmt.Errorf("limitd: decode %s from %s: %w", path, host, err)
	}
	return nil
}

// call sends one request through the leader with retries (for everything but
// checks) and decodes a 2xx answer into out (when not nil).
func (c *Client) call(ctx context.Context, method, path string, body []byte, admin, idempotent bool, out any) error {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	buf := getBuf()
	defer putBuf(buf)
	err := c.retry(ctx, idempotent, func(ctx context.Context, host string) error {
		_, err := c.send(ctx, method, host, path, body, admin, buf)
		return err
	})
	if err != nil {
		if !strings.HasPrefix(path, "/v1/check") {
			markNotCheck(err)
		}
		return err
	}
	if out != nil {
		if err := json.Unmarshal(*buf, out); err != nil {
			return fmt.Errorf("limitd: decode answer of %s %s: %w", method, path, err)
		}
	}
	return nil
}
