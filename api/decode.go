package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/service"
)

// Request decoding: one function per request type, each returning errors that
// name the field by its JSON path ("checks[2].limit.window"). encoding/json
// does not report array indices or the path of an unknown field, so values
// whose errors must be located (batch entries, inline limits) are decoded
// separately from their parents.

// checkJSON is the wire form of one check.
type checkJSON struct {
	Key       string          `json:"key"`
	Policy    string          `json:"policy"`
	Limit     json.RawMessage `json:"limit"`
	Cost      *int64          `json:"cost"` // absent or null means 1
	RequestID string          `json:"request_id"`
	Reserve   *reserveJSON    `json:"reserve"`   // reserve.go
	Overdraft bool            `json:"overdraft"` // reserve.go
}

// decodeCheck decodes the body of POST /v1/check. The service validates the
// rest.
func (s *Server) decodeCheck(body []byte) (service.CheckRequest, *apiError) {
	var fc fastCheckJSON
	if fastCheck(body, &fc) { // no scanJSON needed: see fastCheck
		// One string for the key and the request id; the policy name is
		// interned. The limit stays in body: the limit cache copies it.
		var text string
		if len(fc.key)+len(fc.requestID) > 0 {
			text = string(fc.key) + string(fc.requestID)
		}
		r, _ := s.fastRequest(&fc, text)
		return s.withLimit(r, fc.limit, true)
	}
	cj := new(checkJSON) // encoding/json's target escapes: kept off the fast path
	if e := decodeStrict(body, cj, ""); e != nil {
		return service.CheckRequest{}, e
	}
	return s.checkRequest(cj, true)
}

// fastRequest builds the request of fc, whose key and request id are read
// in order from text (one string for many, to allocate once); it returns
// the rest of text.
func (s *Server) fastRequest(fc *fastCheckJSON, text string) (service.CheckRequest, string) {
	r := service.CheckRequest{Cost: 1}
	if fc.hasCost {
		r.Cost = fc.cost
	}
	r.Key, text = text[:len(fc.key)], text[len(fc.key):]
	r.RequestID, text = text[:len(fc.requestID)], text[len(fc.requestID):]
	if len(fc.policy) > 0 {
		r.Policy = s.policyNames.Get(fc.policy)
	}
	return r, text
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
// fails only when its envelope is wrong; an entry that cannot be decoded gets
// its error in errs[i] and the others are decided.
func (s *Server) decodeBatch(body []byte) (reqs []service.CheckRequest, errs []*service.Error, e *apiError) {
	if reqs, errs, ok := s.fastDecodeBatch(body); ok { // no scanJSON needed: see fastBatch
		return reqs, errs, nil
	}
	var fast batchFastJSON
	if decodeStrict(body, &fast, "") != nil {
		// Something is malformed: decode entry by entry to say where.
		return s.decodeBatchEntries(body)
	}
	if e := s.batchEnvelope(len(fast.Checks), fast.RequestID); e != nil {
		return nil, nil, e
	}
	reqs = make([]service.CheckRequest, len(fast.Checks))
	for i := range fast.Checks {
		var e *apiError
		if reqs[i], e = s.checkRequest(&fast.Checks[i], true); e != nil {
			if errs == nil {
				errs = make([]*service.Error, len(fast.Checks))
			}
			errs[i] = e.serviceError().Under(service.EntryField(i))
		}
	}
	return reqs, errs, nil
}

// fastDecodeBatch is decodeBatch for the shape fastBatch reads: the keys
// and request ids of all checks share one string. false: decode otherwise.
func (s *Server) fastDecodeBatch(body []byte) (reqs []service.CheckRequest, errs []*service.Error, ok bool) {
	fcs, ok := fastBatch(body, make([]fastCheckJSON, 0, 16), s.maxBatch)
	if !ok || len(fcs) == 0 {
		return nil, nil, false // the slow path names the error
	}
	n := 0
	for i := range fcs {
		n += len(fcs[i].key) + len(fcs[i].requestID)
	}
	var sb strings.Builder
	sb.Grow(n)
	for i := range fcs {
		sb.Write(fcs[i].key)
		sb.Write(fcs[i].requestID)
	}
	text := sb.String()
	reqs = make([]service.CheckRequest, len(fcs))
	for i := range fcs {
		var e *apiError
		reqs[i], text = s.fastRequest(&fcs[i], text)
		if reqs[i], e = s.withLimit(reqs[i], fcs[i].limit, true); e != nil {
			if errs == nil {
				errs = make([]*service.Error, len(fcs))
			}
			errs[i] = e.serviceError().Under(service.EntryField(i))
		}
	}
	return reqs, errs, true
}

// decodeBatchEntries is decodeBatch decoding each entry on its own.
func (s *Server) decodeBatchEntries(body []byte) (reqs []service.CheckRequest, errs []*service.Error, e *apiError) {
	var bj batchJSON
	if e := decodeEnvelope(body, &bj); e != nil {
		return nil, nil, e
	}
	if e := s.batchEnvelope(len(bj.Checks), bj.RequestID); e != nil {
		return nil, nil, e
	}
	reqs = make([]service.CheckRequest, len(bj.Checks))
	for i, raw := range bj.Checks {
		var cj checkJSON
		e := decodeStrict(raw, &cj, "")
		if e == nil {
			reqs[i], e = s.checkRequest(&cj, true)
		}
		if e != nil {
			if errs == nil {
				errs = make([]*service.Error, len(bj.Checks))
			}
			errs[i] = e.serviceError().Under(service.EntryField(i))
		}
	}
	return reqs, errs, nil
}

func (s *Server) batchEnvelope(n int, requestID string) *apiError {
	if requestID != "" {
		return invalid("request_id", "each check of a batch carries its own request_id")
	}
	return s.httpError(s.svc.CheckCount(n))
}

// decodeCheckAll decodes the body of POST /v1/check/all: any invalid check
// fails the whole request, since the checks are decided together.
func (s *Server) decodeCheckAll(body []byte) (checks []service.CheckRequest, requestID string, e *apiError) {
	var bj batchJSON
	if e := decodeStrict(body, &bj, ""); e != nil {
		return nil, "", e
	}
	if e := s.svc.CheckCount(len(bj.Checks)); e != nil {
		return nil, "", s.httpError(e)
	}
	if e := service.ValidateRequestID(bj.RequestID, "request_id"); e != nil {
		return nil, "", s.httpError(e)
	}
	checks = make([]service.CheckRequest, len(bj.Checks))
	for i, raw := range bj.Checks {
		var cj checkJSON
		if e := decodeStrict(raw, &cj, ""); e != nil {
			return nil, "", e.under(service.EntryField(i))
		}
		if cj.RequestID != "" {
			return nil, "", invalid(service.EntryField(i)+".request_id",
				"the checks of /v1/check/all are one request: put request_id at the top level")
		}
		if checks[i], e = s.checkRequest(&cj, false); e != nil {
			return nil, "", e.under(service.EntryField(i))
		}
	}
	return checks, bj.RequestID, nil
}

// checkRequest turns a decoded check into the service's request. Only what
// needs JSON is checked here (the inline limit's fields); the service
// validates the rest.
func (s *Server) checkRequest(cj *checkJSON, withRequestID bool) (service.CheckRequest, *apiError) {
	r := service.CheckRequest{Key: cj.Key, Policy: cj.Policy, Cost: 1, RequestID: cj.RequestID}
	if cj.Cost != nil {
		r.Cost = *cj.Cost
	}
	if e := costFields(&r, cj); e != nil { // reserve.go
		return r, e
	}
	return s.withLimit(r, cj.Limit, withRequestID)
}

// withLimit resolves r's inline limit from its JSON (absent or null: none).
func (s *Server) withLimit(r service.CheckRequest, limit json.RawMessage, withRequestID bool) (service.CheckRequest, *apiError) {
	if len(limit) > 0 && string(limit) != "null" {
		e := service.Invalid("limit", "give either policy or limit, not both")
		if r.Policy == "" {
			r.Limit, e = s.limits.Get(limit, "limit", decodeLimitConfig)
		}
		if e != nil {
			// The service validates the key, cost and request id first: so
			// does this error path, to name the same field.
			if first := service.ValidateCheckFields(&r, withRequestID); first != nil {
				e = first
			}
			return r, s.httpError(e)
		}
	}
	return r, nil
}

// limitJSON is an inline limit on the wire. Burst shadows Config.Burst so
// that an explicit 0 can be told from an absent burst.
type limitJSON struct {
	algo.Config
	Burst *int64 `json:"burst,omitempty"`
}

// decodeLimitConfig decodes an inline limit (for service.LimitCache).
func decodeLimitConfig(raw []byte, field string) (algo.Config, *service.Error) {
	var lj limitJSON
	if e := decodeStrict(raw, &lj, field); e != nil {
		return lj.Config, embeddedField(e, field).serviceError()
	}
	if e := setBurst(&lj.Config, lj.Burst, field); e != nil {
		return lj.Config, e.serviceError()
	}
	return lj.Config, nil
}

// setBurst copies an explicit burst into c. 0 is refused rather than read as
// "the default": a client that sends it means something, and the default
// (the limit) is what leaving burst out gives.
func setBurst(c *algo.Config, burst *int64, prefix string) *apiError {
	if burst == nil {
		return nil
	}
	if *burst == 0 {
		return invalid(joinField(prefix, "burst"), "must be positive; leave burst out for the default (the limit)")
	}
	c.Burst = *burst
	return nil
}

// embeddedField fixes the field of a decoding error inside an embedded
// algo.Config, which encoding/json names "Config.window".
func embeddedField(e *apiError, prefix string) *apiError {
	if f, ok := strings.CutPrefix(e.field, joinField(prefix, "Config.")); ok {
		e.field = joinField(prefix, f)
	}
	return e
}

// decodeStrict decodes exactly one JSON value from data into v, refusing
// unknown fields and trailing data, and translates every error into one that
// names the field under prefix.
func decodeStrict(data []byte, v any, prefix string) *apiError {
	if e := scanJSON(data, prefix, true, 0); e != nil {
		return e
	}
	return decodeJSON(data, v, prefix)
}

// decodeEnvelope is decodeStrict for a body whose entries are decoded (and
// checked) one by one: only the top level's fields are scanned.
func decodeEnvelope(data []byte, v any) *apiError {
	if e := scanJSON(data, "", true, 1); e != nil {
		return e
	}
	return decodeJSON(data, v, "")
}

// decodeJSON is decodeStrict without the scan.
func decodeJSON(data []byte, v any, prefix string) *apiError {
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
		return invalid(joinField(prefix, typ.Field), "must be "+describeType(typ.Type)+", got "+clip(typ.Value, maxQuoted))
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
