package service

import (
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// UsageHistory is the Node's usage history (fsm/history.go): one key's
// windows of a limit, and the export of one closed window of every key,
// read from the node's applied state at one applied index without a Raft
// write, like the inventory.
type UsageHistory interface {
	KeyUsage(q nodeapi.UsageQuery) (nodeapi.KeyUsageHistory, error)
	// ExportUsage calls header once, then row per key; an error from
	// either stops it and is returned.
	ExportUsage(q nodeapi.ExportQuery, header func(nodeapi.ExportHeader) error, row func(nodeapi.ExportRow) error) error
	// TopKeys is the node's top keys of a policy (its in-memory sketch).
	TopKeys(q nodeapi.TopKeysQuery) nodeapi.TopKeys
	// Inflight is a key's held slots and open reservations (inflight.go).
	Inflight(q nodeapi.InflightQuery) (nodeapi.Inflight, error)
}

// ValidateHistory parses a limit's "history" option ("" none, else a
// duration such as 400d) for its spec (algo.ValidateHistory). Errors name
// "history" under prefix.
func ValidateHistory(s string, spec algo.Spec, prefix string) (time.Duration, *Error) {
	if s == "" {
		return 0, nil
	}
	d, err := algo.ParseWindow(s)
	if err == nil {
		err = algo.ValidateHistory(spec, d)
	}
	if err != nil {
		var fe *algo.FieldError
		msg := err.Error()
		if errors.As(err, &fe) {
			msg = fe.Message
		}
		return 0, Invalid(joinPrefix(prefix, "history"), msg)
	}
	return d, nil
}

// FormatHistory is a history option as the API shows it ("" for none).
func FormatHistory(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return algo.FormatWindow(d)
}

func validateKey(key string) *Error {
	switch {
	case key == "":
		return Invalid("key", "required")
	case len(key) > MaxKeyBytes:
		return Invalid("key", "must be at most "+strconv.Itoa(MaxKeyBytes)+" bytes, got "+strconv.Itoa(len(key)))
	case !utf8.ValidString(key):
		return Invalid("key", "must be valid UTF-8")
	}
	return nil
}

// ValidateUsageQuery checks a usage read's fields, each error naming the
// query parameter: a key, a policy or a limit of the key's plan (not
// both), from ≤ to, windows 1 to nodeapi.MaxUsageWindows.
func ValidateUsageQuery(q nodeapi.UsageQuery) *Error {
	if e := validateKey(q.Key); e != nil {
		return e
	}
	switch {
	case q.Policy != "" && q.Limit != "":
		return Invalid("limit", "name a policy or a limit of the key's plan, not both")
	case q.Policy != "":
		if e := ValidatePolicyName(q.Policy, "policy"); e != nil {
			return e
		}
	case q.Limit != "":
		if e := ValidatePlanLimitName(q.Limit, "limit"); e != nil {
			return e
		}
	}
	if q.To > 0 && q.To <= q.From {
		return Invalid("to", "must be after from")
	}
	if q.Max < 1 || q.Max > nodeapi.MaxUsageWindows {
		return Invalid("windows", "must be 1 to "+strconv.Itoa(nodeapi.MaxUsageWindows)+", got "+strconv.Itoa(q.Max))
	}
	return nil
}

// KeyUsage answers a key's usage per window of a limit from this node's
// state. Errors: invalid_argument naming the field, not_found naming
// policy, key or limit; internal for a storage failure.
func (s *Service) KeyUsage(q nodeapi.UsageQuery) (nodeapi.KeyUsageHistory, *Error) {
	if e := ValidateUsageQuery(q); e != nil {
		return nodeapi.KeyUsageHistory{}, e
	}
	h, err := s.deps.Usage.KeyUsage(q)
	if err != nil {
		return nodeapi.KeyUsageHistory{}, fromNode(err, "")
	}
	return h, nil
}

// ValidateExportQuery checks an export's fields: exactly one of policy and
// plan, plan_limit only with a plan, a window time.
func ValidateExportQuery(q nodeapi.ExportQuery) *Error {
	if e := ValidateKeysQuery(nodeapi.KeysQuery{Policy: q.Policy, Plan: q.Plan, PlanLimit: q.PlanLimit, Limit: 1}); e != nil {
		return e
	}
	if q.Window <= 0 || q.Window >= algo.MaxTime {
		return Invalid("window", "required: a time inside the window to export (RFC 3339, such as 2026-12-01T00:00:00Z)")
	}
	return nil
}

// ExportUsage streams one closed window's usage of every key of a policy or
// plan limit. An error before the header is the answer (*Error); one after
// it broke the stream (the caller has already written the header).
func (s *Service) ExportUsage(q nodeapi.ExportQuery, header func(nodeapi.ExportHeader) error, row func(nodeapi.ExportRow) error) *Error {
	if e := ValidateExportQuery(q); e != nil {
		return e
	}
	if err := s.deps.Usage.ExportUsage(q, header, row); err != nil {
		return fromNode(err, "")
	}
	return nil
}

// ValidateTopKeysQuery checks a top-keys query, each error naming the
// query parameter: exactly one of policy and plan, plan_limit only with a
// plan, window 5m or 1h, by allowed or refused, limit 1 to
// nodeapi.MaxTopKeys.
func ValidateTopKeysQuery(q nodeapi.TopKeysQuery) *Error {
	// policy, plan and plan_limit are named as a listing names them.
	if e := ValidateKeysQuery(nodeapi.KeysQuery{Policy: q.Policy, Plan: q.Plan, PlanLimit: q.PlanLimit, Limit: 1}); e != nil {
		return e
	}
	if q.Window != 5*time.Minute && q.Window != time.Hour {
		return Invalid("window", "must be 5m or 1h")
	}
	if q.By != nodeapi.TopByAllowed && q.By != nodeapi.TopByRefused {
		return Invalid("by", "must be allowed or refused, got "+strconv.Quote(q.By))
	}
	if q.Limit < 1 || q.Limit > nodeapi.MaxTopKeys {
		return Invalid("limit", "must be 1 to "+strconv.Itoa(nodeapi.MaxTopKeys)+", got "+strconv.Itoa(q.Limit))
	}
	return nil
}

// TopKeys answers the top keys of a policy, or of a plan (the checks
// decided under it) or one of its limits, from this node's sketch, which
// every node holds alike for the whole cluster (fsm/topkeys.go). Errors:
// invalid_argument naming the field, not_found naming policy, plan or
// plan_limit.
func (s *Service) TopKeys(q nodeapi.TopKeysQuery) (nodeapi.TopKeys, *Error) {
	if e := ValidateTopKeysQuery(q); e != nil {
		return nodeapi.TopKeys{}, e
	}
	if q.Plan != "" {
		p, ok := s.deps.Plans.Plan(q.Plan)
		if !ok {
			return nodeapi.TopKeys{}, &Error{Code: CodeNotFound, Field: "plan", Message: "plan " + strconv.Quote(q.Plan) + " does not exist"}
		}
		if _, ok := p.Limit(q.PlanLimit); q.PlanLimit != "" && !ok {
			names := make([]string, len(p.Limits))
			for i := range p.Limits {
				names[i] = p.Limits[i].Name
			}
			sort.Strings(names)
			return nodeapi.TopKeys{}, &Error{Code: CodeNotFound, Field: "plan_limit", Message: "plan " + strconv.Quote(q.Plan) + " has no limit " +
				strconv.Quote(q.PlanLimit) + " (it has " + strings.Join(names, ", ") + ")"}
		}
		return s.deps.Usage.TopKeys(q), nil
	}
	if _, ok := s.deps.Policies.Policy(q.Policy); !ok {
		return nodeapi.TopKeys{}, &Error{Code: CodeNotFound, Field: "policy", Message: "policy " + strconv.Quote(q.Policy) + " does not exist"}
	}
	return s.deps.Usage.TopKeys(q), nil
}
