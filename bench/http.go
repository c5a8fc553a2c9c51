package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CheckSpec is the check every request asks: the key prefix (the key is the
// prefix followed by the key index), and either a policy name or an inline
// limit, and the cost.
type CheckSpec struct {
	KeyPrefix string
	Policy    string // if set, the inline limit is not sent
	// ByPlan sends neither policy nor limit: the check is decided under the
	// key's plan (the plan-resolved workload, limitd bench --plan).
	ByPlan    bool
	Algorithm string
	Limit     int64
	Window    string
	Burst     int64
	Cost      int64
	// HotLimit is the limit of the attack workload's hot keys (IsHot key
	// indexes), always an inline limit of Algorithm over Window; 0 means
	// DefaultHotLimit.
	HotLimit int64
	// HotPolicy, when set, checks the hot keys under this policy instead
	// (limitd bench --hot-refusal banned: a policy with on_exceed).
	HotPolicy string
}

// Key returns the key for index i: the prefix and i, or for a hot key the
// prefix, "hot" and its number.
func (c CheckSpec) Key(i int) string {
	if IsHot(i) {
		return c.KeyPrefix + "hot" + strconv.Itoa(HotNumber(i))
	}
	return c.KeyPrefix + strconv.Itoa(i)
}

func (c CheckSpec) hotLimit() int64 {
	if c.HotLimit > 0 {
		return c.HotLimit
	}
	return DefaultHotLimit
}

// hotBurst is the bucket capacity of the hot keys: the hot limit, so a hot
// key's bucket is as small as its rate.
func (c CheckSpec) hotBurst() int64 {
	if c.Burst > 0 {
		return c.hotLimit()
	}
	return 0
}

// hotSpec is the spec of the hot keys: an inline limit of HotLimit.
func (c CheckSpec) hotSpec() CheckSpec {
	h := c
	h.Policy, h.Limit, h.Burst = c.HotPolicy, c.hotLimit(), c.hotBurst()
	h.KeyPrefix = c.KeyPrefix + "hot"
	return h
}

// BodyEncoder writes check request bodies by splicing the key into a template
// built once, so a request costs an append, not a json.Marshal.
type BodyEncoder struct {
	head []byte // {"key":"<escaped prefix>
	tail []byte // ",<the rest of the object>}
}

// NewBodyEncoder builds the template for c.
func NewBodyEncoder(c CheckSpec) (*BodyEncoder, error) {
	type limit struct {
		Algorithm string `json:"algorithm"`
		Limit     int64  `json:"limit"`
		Window    string `json:"window,omitempty"`
		Burst     int64  `json:"burst,omitempty"`
	}
	type rest struct {
		Policy string `json:"policy,omitempty"`
		Limit  *limit `json:"limit,omitempty"`
		Cost   int64  `json:"cost"` // always sent: 0 is a peek, not the default
	}
	r := rest{Policy: c.Policy, Cost: c.Cost}
	if c.Policy == "" && !c.ByPlan {
		r.Limit = &limit{Algorithm: c.Algorithm, Limit: c.Limit, Window: c.Window, Burst: c.Burst}
	}
	restJSON, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode check template: %w", err)
	}
	prefix, err := json.Marshal(c.KeyPrefix)
	if err != nil {
		return nil, fmt.Errorf("encode key prefix: %w", err)
	}
	e := &BodyEncoder{}
	e.head = append([]byte(`{"key":`), prefix[:len(prefix)-1]...) // keep the opening quote, drop the closing one
	e.tail = append([]byte(`",`), restJSON[1:]...)                // restJSON without its '{'
	return e, nil
}

// AppendCheck appends the JSON object of one check for key index i. The
// decimal digits of i need no escaping, so the key stays valid JSON whatever
// the prefix holds.
func (e *BodyEncoder) AppendCheck(dst []byte, i int) []byte {
	dst = append(dst, e.head...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	return append(dst, e.tail...)
}

// AppendBatch appends a /v1/check/batch body for the key indexes.
func (e *BodyEncoder) AppendBatch(dst []byte, keys []int) []byte {
	dst = append(dst, `{"checks":[`...)
	for j, i := range keys {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = e.AppendCheck(dst, i)
	}
	return append(dst, "]}"...)
}

// HTTPConfig configures an HTTPTarget.
type HTTPConfig struct {
	Addrs       []string // base URLs, e.g. http://127.0.0.1:8080; requests go round-robin
	Check       CheckSpec
	Concurrency int           // sizes the connection pool
	Timeout     time.Duration // per request; 0 means 10 s
	// NetHTTP sends through net/http's client instead of the bench's own
	// (httpconn.go), which costs the generator 1.7–2.6 times less CPU
	// per check.
	NetHTTP bool
	// TLS configures https:// addresses (nil: the system roots, no client
	// certificate).
	TLS *tls.Config
}

// HTTPTarget sends checks to limitd's JSON API.
type HTTPTarget struct {
	conns     *connClient  // the bench's own client, unless NetHTTP
	client    *http.Client // NetHTTP
	checkURLs []string
	batchURLs []string
	enc       *BodyEncoder
	hot       *BodyEncoder // the attack workload's hot keys
	next      atomic.Uint64
	bufs      sync.Pool // *buffers
}

// buffers are one request's body and response. They are separate because the
// transport may still hold the request body after the response has arrived.
type buffers struct{ req, resp []byte }

// NewHTTPTarget returns a target for cfg.
func NewHTTPTarget(cfg HTTPConfig) (*HTTPTarget, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("no addresses to send checks to")
	}
	enc, err := NewBodyEncoder(cfg.Check)
	if err != nil {
		return nil, err
	}
	hot, err := NewBodyEncoder(cfg.Check.hotSpec())
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	conns := max(cfg.Concurrency, 1)
	t := &HTTPTarget{enc: enc, hot: hot}
	t.bufs.New = func() any {
		return &buffers{req: make([]byte, 0, 4096), resp: make([]byte, 0, 4096)}
	}
	if !cfg.NetHTTP {
		if t.conns, err = newConnClient(cfg.Addrs, conns, timeout, cfg.TLS); err != nil {
			return nil, err
		}
		return t, nil
	}
	tr := &http.Transport{
		Proxy:       nil, // loopback and LAN benchmarks: never through an environment proxy
		DialContext: (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		// Every worker keeps its own connection to every node, so no request
		// waits for a dial after the first round.
		MaxIdleConns:          conns * len(cfg.Addrs),
		MaxIdleConnsPerHost:   conns,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: timeout, // a timer per request, without a context per request
		TLSClientConfig:       cfg.TLS,
	}
	t.client = &http.Client{Transport: tr}
	for _, a := range cfg.Addrs {
		base := strings.TrimRight(a, "/")
		t.checkURLs = append(t.checkURLs, base+"/v1/check")
		t.batchURLs = append(t.batchURLs, base+"/v1/check/batch")
	}
	return t, nil
}

// Close drops idle connections.
func (t *HTTPTarget) Close() {
	if t.conns != nil {
		t.conns.closeIdle()
		return
	}
	t.client.CloseIdleConnections()
}

// Do sends one check to the next node in turn.
func (t *HTTPTarget) Do(ctx context.Context, keyIndex int) (bool, error) {
	n := t.next.Add(1)
	b := t.bufs.Get().(*buffers)
	defer t.bufs.Put(b)
	if IsHot(keyIndex) {
		b.req = t.hot.AppendCheck(b.req[:0], HotNumber(keyIndex))
	} else {
		b.req = t.enc.AppendCheck(b.req[:0], keyIndex)
	}
	resp, err := t.post(ctx, n, false, b)
	if err != nil {
		return false, err
	}
	o, err := parseDecision(resp)
	if err != nil {
		return false, err
	}
	return o.Allowed, o.Err
}

// DoBatch sends the checks as one /v1/check/batch request.
func (t *HTTPTarget) DoBatch(ctx context.Context, keys []int, out []Outcome) error {
	n := t.next.Add(1)
	b := t.bufs.Get().(*buffers)
	defer t.bufs.Put(b)
	b.req = t.enc.AppendBatch(b.req[:0], keys)
	resp, err := t.post(ctx, n, true, b)
	if err != nil {
		return err
	}
	return parseBatch(resp, out)
}

// post sends b.req to node n (mod the number of nodes), to /v1/check or
// /v1/check/batch, and returns the 200 response body, read into b.resp. Any
// other status is a *StatusError.
func (t *HTTPTarget) post(ctx context.Context, n uint64, batch bool, b *buffers) ([]byte, error) {
	if t.conns != nil {
		path := "/v1/check"
		if batch {
			path = "/v1/check/batch"
		}
		status, resp, err := t.conns.post(ctx, int(n%uint64(len(t.conns.hosts))), path, b.req, b.resp)
		if err != nil {
			return nil, err
		}
		b.resp = resp
		return statusBody(status, resp)
	}
	url := t.checkURLs[n%uint64(len(t.checkURLs))]
	if batch {
		url = t.batchURLs[n%uint64(len(t.batchURLs))]
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b.req))
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	buf := bytes.NewBuffer(b.resp[:0])
	_, err = buf.ReadFrom(resp.Body)
	b.resp = buf.Bytes()
	if err != nil {
		return nil, fmt.Errorf("read response from %s: %w", url, err)
	}
	return statusBody(resp.StatusCode, b.resp)
}

// statusBody returns a 200 answer's body, or any other answer as a
// *StatusError.
func statusBody(status int, body []byte) ([]byte, error) {
	if status != http.StatusOK {
		se := &StatusError{Status: status}
		se.Code, se.Message = parseError(body)
		return nil, se
	}
	return body, nil
}
