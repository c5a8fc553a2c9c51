package rls

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// HeaderMode selects the response headers an RLS answer asks Envoy to add.
type HeaderMode string

const (
	// HeadersOff adds none (envoy ratelimit's default).
	HeadersOff HeaderMode = ""
	// HeadersDraft adds RateLimit and RateLimit-Policy
	// (draft-ietf-httpapi-ratelimit-headers), one list member per limited
	// descriptor, as limitd's HTTP API does.
	HeadersDraft HeaderMode = "draft"
	// HeadersEnvoy adds envoy ratelimit's RateLimit-Limit, RateLimit-Remaining
	// and RateLimit-Reset for the most restrictive descriptor.
	HeadersEnvoy HeaderMode = "envoy"
)

// ParseHeaderMode reads "", "off", "draft" or "envoy".
func ParseHeaderMode(s string) (HeaderMode, error) {
	switch s {
	case "", "off":
		return HeadersOff, nil
	case string(HeadersDraft), string(HeadersEnvoy):
		return HeaderMode(s), nil
	}
	return "", fmt.Errorf("unknown response header mode %q (want off, draft or envoy)", s)
}

// Header is one response header.
type Header struct{ Key, Value string }

// Headers returns the headers mode asks for.
func (r *Response) Headers(mode HeaderMode) []Header {
	switch mode {
	case HeadersDraft:
		return r.draftHeaders()
	case HeadersEnvoy:
		return r.envoyHeaders()
	}
	return nil
}

func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

func (r *Response) draftHeaders() []Header {
	var policy, limit strings.Builder
	for i := range r.Statuses {
		st := &r.Statuses[i]
		if st.Limit == nil {
			continue
		}
		if policy.Len() > 0 {
			policy.WriteString(", ")
			limit.WriteString(", ")
		}
		name := sfString(st.Limit.label())
		policy.WriteString(name + ";q=" + strconv.FormatUint(uint64(st.Limit.RequestsPerUnit), 10))
		if w := st.Limit.window(); w > 0 {
			policy.WriteString(";w=" + strconv.FormatInt(seconds(w), 10))
		}
		limit.WriteString(name + ";r=" + strconv.FormatUint(uint64(st.Remaining), 10) +
			";t=" + strconv.FormatInt(seconds(st.UntilReset), 10))
	}
	if policy.Len() == 0 {
		return nil
	}
	return []Header{{"RateLimit-Policy", policy.String()}, {"RateLimit", limit.String()}}
}

// envoyHeaders describes the first descriptor over the limit, else the one
// with the least remaining, as envoy ratelimit does.
func (r *Response) envoyHeaders() []Header {
	var pick *Status
	for i := range r.Statuses {
		st := &r.Statuses[i]
		if st.Limit == nil {
			continue
		}
		if st.OverLimit {
			pick = st
			break
		}
		if pick == nil || st.Remaining < pick.Remaining {
			pick = st
		}
	}
	if pick == nil {
		return nil
	}
	rem := pick.Remaining
	if pick.OverLimit {
		rem = 0
	}
	return []Header{
		{"RateLimit-Limit", strconv.FormatUint(uint64(pick.Limit.RequestsPerUnit), 10)},
		{"RateLimit-Remaining", strconv.FormatUint(uint64(rem), 10)},
		{"RateLimit-Reset", strconv.FormatInt(seconds(pick.UntilReset), 10)},
	}
}

// label names a limit in headers: the rule's name, else its descriptor path.
func (c *CurrentLimit) label() string {
	if c.Name != "" {
		return c.Name
	}
	return c.Rule.FullKey
}

// window is the limit's window length when it is fixed (0 for calendar windows).
func (c *CurrentLimit) window() time.Duration {
	if c.Rule.Spec.Limit > 0 {
		return c.Rule.Spec.Window
	}
	return c.Unit.Duration()
}

// sfString quotes s as a structured-field string: printable ASCII only, with
// '"' and '\' escaped; other bytes become '_'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
