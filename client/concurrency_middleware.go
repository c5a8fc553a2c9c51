package client

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// releaseTimeout bounds the release a ConcurrencyMiddleware sends after the
// handler returns: a release that cannot be made in it is left to the
// slot's hold, which frees it anyway.
const releaseTimeout = 5 * time.Second

// ConcurrencyMiddleware limits the requests an http.Handler serves at once
// per key, with policy (a concurrency policy: "at most N in flight"), keyed
// by keyFunc. Each request acquires a slot before next runs and releases it
// when next returns, also when next panics (the panic goes on up). A
// refused request is answered 429 with Retry-After in whole seconds (when
// the earliest held slot ends, at least 1) and never reaches next.
//
// The release is sent with the request's values but not its cancellation: a
// client that hangs up must not leave its slot held until the hold ends.
// A request that outlives the policy's hold loses its slot at the hold's
// end (the policy's hold is the bound on a request's length; renew by hand
// with Acquire and Renew for longer work).
//
// A request for which keyFunc returns "" passes unlimited. When the
// cluster is unavailable the client's fail mode decides, as for
// Middleware: FailOpen passes (holding no slot), FailClosed and FailLocal
// answer 429 with Retry-After: 1, FailError answers 503 with Retry-After: 1.
func (c *Client) ConcurrencyMiddleware(policy string, keyFunc func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := keyFunc(r)
			if key == "" {
				next.ServeHTTP(w, r)
				return
			}
			s, release, err := c.Acquire(r.Context(), Request{Key: key, Policy: policy})
			h := w.Header()
			switch {
			case err == nil:
			case errors.Is(err, ErrNoSlot) && s.Decision.Degraded && s.Decision.Allowed:
				// FailOpen: admitted without a slot, nothing to release.
				next.ServeHTTP(w, r)
				return
			case errors.Is(err, ErrNoSlot):
				retry := int64(1)
				if s.Decision.RetryAfter > 0 {
					retry = ceilSeconds(s.Decision.RetryAfter)
				}
				h.Set("Retry-After", strconv.FormatInt(retry, 10))
				http.Error(w, "too many requests in flight", http.StatusTooManyRequests)
				return
			default:
				h.Set("Retry-After", "1")
				http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
				return
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), releaseTimeout)
				defer cancel()
				_ = release(ctx) // on failure the hold's end frees the slot
			}()
			next.ServeHTTP(w, r)
		})
	}
}
