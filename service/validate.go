package service

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/limitd/limitd/algo"
)

// ValidateKey checks a key: 1 to MaxKeyBytes bytes. Keys are exact bytes.
func ValidateKey(key, field string) *Error {
	switch {
	case key == "":
		return Invalid(field, "is required and must not be empty")
	case len(key) > MaxKeyBytes:
		return Invalid(field, "must be at most "+strconv.Itoa(MaxKeyBytes)+" bytes, got "+strconv.Itoa(len(key)))
	}
	return nil
}

// ValidateRequestID checks a request id: empty (none) or up to MaxRequestIDBytes.
func ValidateRequestID(id, field string) *Error {
	if len(id) > MaxRequestIDBytes {
		return Invalid(field, "must be at most "+strconv.Itoa(MaxRequestIDBytes)+" bytes, got "+strconv.Itoa(len(id)))
	}
	return nil
}

// ValidatePolicyName enforces [A-Za-z0-9_.:-]{1,MaxPolicyName}: names appear
// unquoted in URLs, headers and metric labels.
func ValidatePolicyName(name, field string) *Error {
	if name == "" {
		return Invalid(field, "must not be empty")
	}
	if len(name) > MaxPolicyName {
		return Invalid(field, "must be at most "+strconv.Itoa(MaxPolicyName)+" characters")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return Invalid(field, "may contain only letters, digits, '_', '.', ':' and '-'; found "+strconv.QuoteRune(rune(c)))
		}
	}
	return nil
}

// ValidateLimit validates a limit as a client gave it (an inline limit or a
// policy's), naming a faulty field under prefix ("limit" + "window" →
// "limit.window").
func ValidateLimit(c algo.Config, prefix string) (algo.Spec, *Error) {
	spec, err := c.Spec()
	if err != nil {
		var fe *algo.FieldError
		if errors.As(err, &fe) {
			return algo.Spec{}, Invalid(fe.Field, fe.Message).Under(prefix)
		}
		return algo.Spec{}, Invalid(prefix, err.Error())
	}
	return spec, nil
}

// LimitCache remembers validated inline limits by a front end's encoding of
// them (the exact JSON bytes, say): clients send the same few limits on every
// check, and parsing and validating one costs more than the rest of a
// request. Cached specs are shared and must never be modified. The zero
// value is ready to use.
type LimitCache struct {
	mu    sync.RWMutex
	specs map[string]*algo.Spec
}

// maxCachedLimits bounds a LimitCache; past it, limits are parsed every time
// (a client sending endless distinct limits gets no worse than no cache).
const maxCachedLimits = 1024

// Get returns the validated limit encoded as raw, calling decode (which
// names its errors under field) and ValidateLimit when raw is not cached.
func (c *LimitCache) Get(raw []byte, field string, decode func(raw []byte, field string) (algo.Config, *Error)) (*algo.Spec, *Error) {
	c.mu.RLock()
	spec, ok := c.specs[string(raw)]
	c.mu.RUnlock()
	if ok {
		return spec, nil
	}
	cfg, e := decode(raw, field)
	if e != nil {
		return nil, e
	}
	s, e := ValidateLimit(cfg, field)
	if e != nil {
		return nil, e
	}
	spec = &s
	c.mu.Lock()
	if c.specs == nil {
		c.specs = make(map[string]*algo.Spec)
	}
	if len(c.specs) < maxCachedLimits {
		c.specs[string(raw)] = spec
	}
	c.mu.Unlock()
	return spec, nil
}

// validateHostPort checks host:port with a port in 1..65535.
func validateHostPort(addr, field string) *Error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Invalid(field, fmt.Sprintf("must be host:port, got %q", addr))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return Invalid(field, fmt.Sprintf("the port must be a number from 1 to 65535, got %q", port))
	}
	return nil
}
