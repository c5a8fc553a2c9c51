package client

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/limitd/limitd/algo"
)

// policyWindowTTL is how long the middleware trusts a policy's window it
// read for the RateLimit-Policy header.
const policyWindowTTL = time.Minute

// Middleware limits an http.Handler with policy, keyed by keyFunc (for
// example the API key header or the client IP). Every response carries
// RateLimit and RateLimit-Policy headers (draft-ietf-httpapi-ratelimit-headers,
// as limitd's own endpoints send them); a refused request is answered 429
// with Retry-After in whole seconds and never reaches next.
//
// A request for which keyFunc returns "" passes unlimited. When the cluster
// is unavailable the client's fail mode decides: FailOpen passes,
// FailClosed answers 429 with Retry-After: 1, FailError answers 503 with
// Retry-After: 1.
func (c *Client) Middleware(policy string, keyFunc func(*http.Request) string) func(http.Handler) http.Handler {
	pw := &policyWindow{c: c, name: policy}
	quoted := strconv.Quote(policy)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := keyFunc(r)
			if key == "" {
				next.ServeHTTP(w, r)
				return
			}
			d, err := c.Check(r.Context(), Request{Key: key, Policy: policy})
			h := w.Header()
			if err != nil {
				h.Set("Retry-After", "1")
				http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
				return
			}
			if !d.Degraded {
				pol := quoted + ";q=" + strconv.FormatInt(d.Limit, 10)
				if win := pw.seconds(r.Context()); win > 0 {
					pol += ";w=" + strconv.FormatInt(win, 10)
				}
				h.Set("RateLimit-Policy", pol)
				h.Set("RateLimit", quoted+";r="+strconv.FormatInt(d.Remaining, 10)+";t="+strconv.FormatInt(ceilSeconds(d.ResetAfter), 10))
			}
			if !d.Allowed {
				retry := int64(1)
				if d.RetryAfter > 0 {
					retry = ceilSeconds(d.RetryAfter)
				}
				// Never (a cost above the limit) still gets a hint: a silent
				// 429 without Retry-After makes clients retry at once.
				h.Set("Retry-After", strconv.FormatInt(retry, 10))
				http.Error(w, "too many requests", http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// policyWindow caches a policy's window in seconds (0: unknown or calendar).
type policyWindow struct {
	c    *Client
	name string
	mu   sync.Mutex
	secs int64
	at   time.Time
}

func (p *policyWindow) seconds(ctx context.Context) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < policyWindowTTL {
		return p.secs
	}
	p.at = time.Now()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	pol, err := p.c.GetPolicy(ctx, p.name)
	if err != nil || pol.Window == "" {
		p.secs = 0
		return 0
	}
	ns, err := algo.ParseWindow(pol.Window)
	if err != nil {
		p.secs = 0
		return 0
	}
	p.secs = int64((ns + time.Second - 1) / time.Second)
	return p.secs
}
