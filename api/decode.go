package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
)

// Request decoding: one function per request type, each returning errors that
// name the field by its JSON path ("checks[2].limit.window"). encoding/json
// does not report array indices or the path of an unknown field, so values
// whose errors must be located (batch entries, inline limits) are decoded
// separately from their parents.

// Limits on client input. Keys and request ids are bounded so that a client
// cannot make the log, the database or the request table grow without bound
// per request.
const (
	MaxKeyBytes       = 1024
	MaxRequestIDBytes = 128
	MaxPolicyName     = 128
)

// checkJSON is the wire form of one check.
type checkJSON struct {
	Key       string          `json:"key"`
	Policy    string          `json:"policy"`
	Limit     json.RawMessage `json:"limit"`
	Cost      *int64          `json:"cost"` // absent or null means 1
	RequestID string          `json:"request_id"`
}

// checkRequest is a decoded, validated check.
type checkRequest struct {
	check     fsm.Check
	requestID string
	ref       limitRef
}

// decodeCheck decodes the body of POST /v1/check.
func (s *Server) decodeCheck(body []byte) (checkRequest, *apiError) {
	var cj checkJSON
	if e := decodeStrict(body, &cj, ""); e != nil {
		return checkRequest{}, e
	}
	return s.validateCheck(&cj, true)
}

// batchJSON is the wire form of POST /v1/check/batch and /v1/check/all, with
// each check left undecoded so that its errors can be located.
type batchJSON struct {
	Checks    []json.RawMessage `json:"checks"`
	RequestID string            `json:"request_id"` // /v1/check/all only
}

// batchFastJSON is batchJSON decoded in one pass: the common case, where
// every entry is well-formed JSON of the right types.
type batchFastJSON struct {
	Checks    []checkJSON `json:"checks"`
	RequestID string      `json:"request_id"`
}

// decodeBatch decodes the body of POST /v1/check/batch. The request as a whole
// fails only when its envelope is wrong; an invalid entry gets its error in
// errs[i] and the others are decided.
func (s *Server) decodeBatch(body []byte) (reqs []checkRequest, errs []*apiError, e *apiError) {
	var fast batchFastJSON
	if decodeStrict(body, &fast, "") != nil {
		// Something is malformed: decode entry by entry to say where.
		return s.decodeBatchEntries(body)
	}
	if e := s.batchEnvelope(len(fast.Checks), fast.RequestID); e != nil {
		return nil, nil, e
	}
	reqs = make([]checkRequest, len(fast.Checks))
	for i := range fast.Checks {
		var e *apiError
		if reqs[i], e = s.validateCheck(&fast.Checks[i], true); e != nil {
			if errs == nil {
				errs = make([]*apiError, len(fast.Checks))
			}
			errs[i] = e.under(entryPrefix(i))
		}
	}
	return reqs, errs, nil
}

// decodeBatchEntries is decodeBatch decoding each entry on its own.
func (s *Server) decodeBatchEntries(body []byte) (reqs []checkRequest, errs []*apiError, e *apiError) {
	var bj batchJSON
	if e := decodeStrict(body, &bj, ""); e != nil {
		return nil, nil, e
	}
	if e := s.batchEnvelope(len(bj.Checks), bj.RequestID); e != nil {
		return nil, nil, e
	}
	reqs = make([]checkRequest, len(bj.Checks))
	for i, raw := range bj.Checks {
		var cj checkJSON
		e := decodeStrict(raw, &cj, "")
		if e == nil {
			reqs[i], e = s.validateCheck(&cj, true)
		}
		if e != nil {
			if errs == nil {
				errs = make([]*apiError, len(bj.Checks))
			}
			errs[i] = e.under(entryPrefix(i))
		}
	}
	return reqs, errs, nil
}

func (s *Server) batchEnvelope(n int, requestID string) *apiError {
	if requestID != "" {
		return invalid("request_id", "each check of a batch carries its own request_id")
	}
	return s.checkCount(n)
}

// entryPrefix locates entry i of "checks"; built only for errors.
func entryPrefix(i int) string { return "checks[" + strconv.Itoa(i) + "]" }

// decodeCheckAll decodes the body of POST /v1/check/all: any invalid check
// fails the whole request, since the checks are decided together.
func (s *Server) decodeCheckAll(body []byte) (checks []fsm.Check, refs []limitRef, requestID string, e *apiError) {
	var bj batchJSON
	if e := decodeStrict(body, &bj, ""); e != nil {
		return nil, nil, "", e
	}
	if e := s.checkCount(len(bj.Checks)); e != nil {
		return nil, nil, "", e
	}
	if e := validateRequestID(bj.RequestID, "request_id"); e != nil {
		return nil, nil, "", e
	}
	checks = make([]fsm.Check, len(bj.Checks))
	refs = make([]limitRef, len(bj.Checks))
	for i, raw := range bj.Checks {
		var cj checkJSON
		if e := decodeStrict(raw, &cj, ""); e != nil {
			return nil, nil, "", e.under(entryPrefix(i))
		}
		if cj.RequestID != "" {
			return nil, nil, "", invalid(entryPrefix(i)+".request_id",
				"the checks of /v1/check/all are one request: put request_id at the top level")
		}
		r, e := s.validateCheck(&cj, false)
		if e != nil {
			return nil, nil, "", e.under(entryPrefix(i))
		}
		checks[i], refs[i] = r.check, r.ref
	}
	return checks, refs, bj.RequestID, nil
}

func (s *Server) checkCount(n int) *apiError {
	if n == 0 {
		return invalid("checks", "must hold at least one check")
	}
	if n > s.cfg.MaxBatch {
		return invalid("checks", "at most "+strconv.Itoa(s.cfg.MaxBatch)+" checks per request")
	}
	return nil
}

// validateCheck turns a decoded check into a request, validating every field.
// Fields are named relative to the check; batch callers locate it with under.
func (s *Server) validateCheck(cj *checkJSON, withRequestID bool) (checkRequest, *apiError) {
	if e := validateKey(cj.Key, "key"); e != nil {
		return checkRequest{}, e
	}
	r := checkRequest{check: fsm.Check{Key: cj.Key, Cost: 1}}
	if cj.Cost != nil {
		if *cj.Cost < 0 {
			return checkRequest{}, invalid("cost", "must be zero (a peek) or a positive integer")
		}
		r.check.Cost = *cj.Cost
	}
	if withRequestID {
		if e := validateRequestID(cj.RequestID, "request_id"); e != nil {
			return checkRequest{}, e
		}
		r.requestID = cj.RequestID
	}
	hasLimit := len(cj.Limit) > 0 && string(cj.Limit) != "null"
	switch {
	case cj.Policy != "" && hasLimit:
		return checkRequest{}, invalid("limit", "give either policy or limit, not both")
	case cj.Policy != "":
		if e := validatePolicyName(cj.Policy, "policy"); e != nil {
			return checkRequest{}, e
		}
		r.check.Policy = cj.Policy
		r.ref = s.policyRef(cj.Policy)
	case hasLimit:
		spec, e := s.specs.get(cj.Limit, "limit")
		if e != nil {
			return checkRequest{}, e
		}
		r.check.Spec = spec
		r.ref = limitRef{name: inlineName, spec: *spec, known: true}
	default:
		return checkRequest{}, invalid("policy", "a check needs a policy name or an inline limit")
	}
	return r, nil
}

// inlineName names inline limits in headers and metrics.
const inlineName = "inline"

// policyRef looks the policy up in this node's replicated copy for the headers;
// the state machine decides whether it exists.
func (s *Server) policyRef(name string) limitRef {
	p, ok := s.store.Policy(name)
	return limitRef{name: name, spec: p.Spec, known: ok}
}

func validateKey(key, field string) *apiError {
	switch {
	case key == "":
		return invalid(field, "is required and must not be empty")
	case len(key) > MaxKeyBytes:
		return invalid(field, "must be at most "+strconv.Itoa(MaxKeyBytes)+" bytes, got "+strconv.Itoa(len(key)))
	}
	return nil
}

func validateRequestID(id, field string) *apiError {
	if len(id) > MaxRequestIDBytes {
		return invalid(field, "must be at most "+strconv.Itoa(MaxRequestIDBytes)+" bytes, got "+strconv.Itoa(len(id)))
	}
	return nil
}

// validatePolicyName enforces [A-Za-z0-9_.:-]{1,128}: names appear unquoted in
// URLs, headers and metric labels.
func validatePolicyName(name, field string) *apiError {
	if name == "" {
		return invalid(field, "must not be empty")
	}
	if len(name) > MaxPolicyName {
		return invalid(field, "must be at most "+strconv.Itoa(MaxPolicyName)+" characters")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return invalid(field, "may contain only letters, digits, '_', '.', ':' and '-'; found "+strconv.QuoteRune(rune(c)))
		}
	}
	return nil
}

// decodeLimit decodes and validates an inline limit or a policy body.
func decodeLimit(raw []byte, field string) (algo.Spec, *apiError) {
	var c algo.Config
	if e := decodeStrict(raw, &c, field); e != nil {
		return algo.Spec{}, e
	}
	return configSpec(c, field)
}

// configSpec validates c; a *algo.FieldError names the field under prefix.
func configSpec(c algo.Config, prefix string) (algo.Spec, *apiError) {
	spec, err := c.Spec()
	if err != nil {
		var fe *algo.FieldError
		if errors.As(err, &fe) {
			return algo.Spec{}, invalid(joinField(prefix, fe.Field), fe.Message)
		}
		return algo.Spec{}, invalid(prefix, err.Error())
	}
	return spec, nil
}

// specCache remembers validated inline limits by their exact JSON bytes:
// clients send the same few limits on every check, and parsing and validating
// one costs more than the rest of the decoding. Cached specs are shared and
// must never be modified.
type specCache struct {
	mu    sync.RWMutex
	specs map[string]*algo.Spec
}

// maxCachedSpecs bounds the cache; past it, limits are parsed every time
// (a client sending endless distinct limits gets no worse than no cache).
const maxCachedSpecs = 1024

func (c *specCache) get(raw []byte, field string) (*algo.Spec, *apiError) {
	c.mu.RLock()
	spec, ok := c.specs[string(raw)]
	c.mu.RUnlock()
	if ok {
		return spec, nil
	}
	s, e := decodeLimit(raw, field)
	if e != nil {
		return nil, e
	}
	spec = &s
	c.mu.Lock()
	if c.specs == nil {
		c.specs = make(map[string]*algo.Spec)
	}
	if len(c.specs) < maxCachedSpecs {
		c.specs[string(raw)] = spec
	}
	c.mu.Unlock()
	return spec, nil
}

// decodeStrict decodes exactly one JSON value from data into v, refusing
// unknown fields and trailing data, and translates every error into one that
// names the field under prefix.
func decodeStrict(data []byte, v any, prefix string) *apiError {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, prefix)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid(prefix, "unexpected data after the JSON value at byte "+strconv.FormatInt(dec.InputOffset(), 10))
	}
	return nil
}

// jsonError translates an encoding/json error.
func jsonError(err error, prefix string) *apiError {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		if prefix == "" {
			return invalid("", "the request body is empty; send a JSON object")
		}
		return invalid(prefix, "must be a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid(prefix, "malformed JSON: unexpected end of input")
	case errors.As(err, &syntax):
		return invalid(prefix, "malformed JSON at byte "+strconv.FormatInt(syntax.Offset, 10)+": "+
			strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ):
		return invalid(joinField(prefix, typ.Field), "must be "+describeType(typ.Type)+", got "+typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if n, err := strconv.Unquote(name); err == nil {
			name = n
		}
		return invalid(joinField(prefix, name), "unknown field")
	}
	return invalid(prefix, strings.TrimPrefix(err.Error(), "json: "))
}

// describeType names a Go type as a client knows it.
func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	case reflect.Pointer:
		return describeType(t.Elem())
	}
	return "a " + t.String()
}
