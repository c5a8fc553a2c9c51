package algo

// TEMPORARY: signatures of the algo API so other packages compile while the
// algorithms are written. The owner of algo/ replaces this file.

import "errors"

var errNotImplemented = errors.New("algo: not implemented yet")

// Config is the JSON form of a Spec, shared by the HTTP API, policy files and
// `limitd simulate`. Window is a duration string such as "60s", "1h30m" or "7d".
type Config struct {
	Algorithm    string `json:"algorithm"`
	Limit        int64  `json:"limit"`
	Window       string `json:"window,omitempty"`
	Burst        int64  `json:"burst,omitempty"`
	CountRefused bool   `json:"count_refused,omitempty"`
	Calendar     string `json:"calendar,omitempty"`
	Timezone     string `json:"timezone,omitempty"`
}

// Spec validates the config and returns the normalized Spec, or a *FieldError.
func (c Config) Spec() (Spec, error) { return Spec{}, errNotImplemented }

// Config returns the JSON form of a spec (inverse of Config.Spec).
func (s Spec) Config() Config { return Config{} }

// Validate checks a spec and returns it normalized (Burst defaulted to Limit for
// the buckets, zero elsewhere), or a *FieldError.
func (s Spec) Validate() (Spec, error) { return s, errNotImplemented }

// ParseAlgorithm maps "fixed_window" etc. to an Algorithm.
func ParseAlgorithm(name string) (Algorithm, error) { return 0, errNotImplemented }

func (a Algorithm) String() string { return "" }

// AppendSpec appends the canonical, versioned binary encoding of a validated
// spec to dst. Equal specs encode to equal bytes (used as the identity of
// inline limits in storage keys).
func AppendSpec(dst []byte, s Spec) []byte { return dst }

// DecodeSpec decodes a spec written by AppendSpec and returns the bytes read.
func DecodeSpec(b []byte) (Spec, int, error) { return Spec{}, 0, errNotImplemented }

// Decide applies a request of cost at time now (ns since the epoch) to the
// encoded state (nil or empty = a fresh key) under the validated spec s.
// It appends the new encoded state to dst and returns it as next; next is nil
// when the state is equivalent to a fresh key (the caller may delete it).
// Decide never modifies state (it may be read-only mmap'd memory) and next never
// aliases it. A state written for another algorithm is treated as fresh.
// cost 0 is a peek: nothing is consumed and next equals the (pruned) state;
// the peek's Allowed reports whether a request of cost 1 would be allowed.
// The state expires (is equivalent to fresh) at now + d.ResetAfter.
func Decide(dst []byte, s *Spec, state []byte, now, cost int64) (d Decision, next []byte, err error) {
	return Decision{}, nil, errNotImplemented
}
