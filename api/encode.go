package api

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
	"github.com/limitd/limitd/wire"
)

// Responses on the check path are built by appending bytes into pooled buffers:
// reflection-based json.Marshal would cost more than the rest of the handler.

// Canonical header keys, so headers can be set by map assignment without
// re-canonicalizing (and allocating) on every response.
const (
	hdrContentType     = "Content-Type"
	hdrRateLimit       = "Ratelimit"        // RateLimit
	hdrRateLimitPolicy = "Ratelimit-Policy" // RateLimit-Policy
	hdrRetryAfter      = "Retry-After"
	// hdrLeader, on check responses answered by a follower, is the leader's
	// HTTP address, so that leader-aware clients can skip the forwarding hop.
	hdrLeader = "Limitd-Leader"
	// hdrDegraded, "true" when a check of the answer was decided by this
	// node alone, with its share of the limit (service/degraded.go).
	hdrDegraded = "Limitd-Degraded"
)

// Header values shared by every response. net/http never mutates them.
var contentTypeJSON = []string{"application/json"}

type buffer struct{ b []byte }

var bufferPool = sync.Pool{New: func() any { return &buffer{b: make([]byte, 0, 512)} }}

func getBuffer() *buffer { return bufferPool.Get().(*buffer) }

func putBuffer(buf *buffer) {
	// Keep huge batch responses from pinning memory in the pool.
	if cap(buf.b) > 1<<16 {
		return
	}
	bufferPool.Put(buf)
}

// setLeader adds the Limitd-Leader header when this node is a follower that
// knows the leader (see docs/API.md). It allocates nothing.
func (s *Server) setLeader(h http.Header) {
	if addr := s.svc.Leader(); addr != nil {
		h[hdrLeader] = addr
	}
	s.setSlotEpoch(h)
}

// setSlotEpoch adds Limitd-Slot-Epoch on a node with data groups
// (api/hashslots.go).
func (s *Server) setSlotEpoch(h http.Header) {
	if e := s.svc.SlotEpochHeader(); e != nil {
		h[hdrSlotEpoch] = e
	}
}

// setLeaderAt is setLeader for a caller that read the clock (now) already.
func (s *Server) setLeaderAt(h http.Header, now time.Time) {
	if addr := s.svc.LeaderAt(now); addr != nil {
		h[hdrLeader] = addr
	}
	s.setSlotEpoch(h)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h[hdrContentType] = contentTypeJSON
	// net/http computes Content-Length itself for bodies that fit its 2 KiB
	// chunking buffer; larger ones (batches) would otherwise be chunked.
	if len(body) > 2048 {
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// toSeconds is wire.Millis for whole seconds (HTTP headers), rounded up.
func toSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return ceilDiv(int64(d), int64(time.Second))
}

// allowed is what the client is told: a shadow policy's refusal is reported as
// allowed (with shadow_refused).
func allowed(d *nodeapi.Decision) bool { return service.Allowed(d) }

// appendDecision appends one decision object, as the wire schema writes it.
func appendDecision(b []byte, d *nodeapi.Decision, replayed bool) []byte {
	w := wire.Decision{
		Allowed: allowed(d), Limit: d.Limit, Remaining: d.Remaining,
		ResetAfterMS: wire.Millis(d.ResetAfter), RetryAfterMS: wire.Millis(d.RetryAfter), DelayMS: wire.Millis(d.Delay),
		ShadowRefused: d.ShadowRefused, Replayed: replayed,
		Slot: d.Slot, SlotExpiresMS: wire.Millis(d.SlotHold), Degraded: d.Degraded,
		Reservation: d.Reservation, ReservationExpiresMS: wire.Millis(d.ReservationHold), Debt: d.Debt,
	}
	if d.Plan != nil {
		w.Extra = appendPlanDecision(nil, d.Plan) // plans.go
	}
	if d.Reason != nodeapi.ReasonNone {
		w.Reason = d.Reason.String()
	}
	return wire.AppendDecision(b, &w)
}

// appendPolicyItem appends one RateLimit-Policy list member,
// `"<name>";q=<quota>;w=<window seconds>` (draft-ietf-httpapi-ratelimit-headers).
// w is left out for calendar windows, whose length varies. For token and
// leaky buckets q is the bucket's capacity (burst), so that RateLimit's r
// never exceeds it, and w is the time the bucket takes to regain limit units.
func appendPolicyItem(b []byte, ref *service.Limit, d *nodeapi.Decision) []byte {
	b = wire.AppendString(b, ref.Name) // names are restricted to token characters: no escapes
	b = append(b, ";q="...)
	if ref.Known {
		q := ref.Spec.Limit
		if a := ref.Spec.Algorithm; a == algo.TokenBucket || a == algo.LeakyBucket {
			q = max(q, ref.Spec.Burst)
		}
		b = strconv.AppendInt(b, q, 10)
		if ref.Spec.Calendar == algo.CalendarNone && ref.Spec.Window > 0 {
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, toSeconds(ref.Spec.Window), 10)
		}
		return b
	}
	// Not known here yet (replication lag): the decision's limit, or more
	// when a bucket holds more than its limit.
	return strconv.AppendInt(b, max(d.Limit, d.Remaining), 10)
}

// appendRateLimitItem appends one RateLimit list member,
// `"<name>";r=<remaining>;t=<seconds until reset, rounded up>`.
func appendRateLimitItem(b []byte, ref *service.Limit, d *nodeapi.Decision) []byte {
	b = wire.AppendString(b, ref.Name)
	b = append(b, ";r="...)
	rem := d.Remaining
	if rem < 0 {
		rem = 0
	}
	b = strconv.AppendInt(b, rem, 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, toSeconds(d.ResetAfter), 10)
}

// setRateLimitHeaders sets RateLimit-Policy and RateLimit for the checks of one
// op, and Retry-After when the op was refused: the longest wait among the
// refusing checks, in whole seconds rounded up, left out when one of them can
// never succeed (retry_after_ms -1), since no wait would help.
func setRateLimitHeaders(h http.Header, refs []service.Limit, ds []nodeapi.Decision, opAllowed bool, scratch []byte) []byte {
	// The values are built in one buffer and converted with one allocation,
	// and their slices share one array: two allocations for all three.
	b := scratch[:0]
	for i := range ds {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendPolicyItem(b, &refs[i], &ds[i])
	}
	policyEnd := len(b)
	for i := range ds {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendRateLimitItem(b, &refs[i], &ds[i])
	}
	rateLimitEnd := len(b)
	if wait := retryWait(ds, opAllowed); wait > 0 {
		b = strconv.AppendInt(b, toSeconds(wait), 10)
	}
	all := string(b)
	n := 2
	if len(all) > rateLimitEnd {
		n = 3
	}
	vals := make([]string, n)
	vals[0], vals[1] = all[:policyEnd], all[policyEnd:rateLimitEnd]
	h[hdrRateLimitPolicy] = vals[0:1:1]
	h[hdrRateLimit] = vals[1:2:2]
	if n == 3 {
		vals[2] = all[rateLimitEnd:]
		h[hdrRetryAfter] = vals[2:3:3]
	}
	for i := range ds {
		if ds[i].Degraded {
			h[hdrDegraded] = degradedTrue
			break
		}
	}
	return b
}

var degradedTrue = []string{"true"}

// retryWait is what Retry-After says for an op (0: nothing): the longest
// wait among its refusing checks, or algo.Never when one of them can never
// succeed.
func retryWait(ds []nodeapi.Decision, opAllowed bool) time.Duration {
	if opAllowed {
		return 0
	}
	var wait time.Duration
	for i := range ds {
		d := &ds[i]
		if allowed(d) {
			continue
		}
		if d.RetryAfter == algo.Never {
			return algo.Never
		}
		wait = max(wait, d.RetryAfter)
	}
	return wait
}
