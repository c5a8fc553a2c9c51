package service

import (
	"strconv"
	"unicode/utf8"

	"github.com/limitd/limitd/nodeapi"
)

// Inventory is the Node's usage inventory: one page of the keys of a policy
// or plan limit with their usage, read from the node's applied state at one
// applied index without a Raft write (GET /v1/keys). A page may lag the
// leader like every replica read; it reports the index it reflects.
type Inventory interface {
	ListKeys(q nodeapi.KeysQuery) (nodeapi.KeysPage, error)
}

// maxCursorBytes bounds a cursor: a sorted one holds a key, a sort value and
// two bytes, base64url.
const maxCursorBytes = (MaxKeyBytes+2+10)*4/3 + 4

// ValidateKeysQuery checks a listing's fields, each error naming the
// query parameter: exactly one of policy and plan, plan_limit only with a
// plan, a prefix within the key bound, a known sort, limit 1 to
// nodeapi.MaxKeysLimit.
func ValidateKeysQuery(q nodeapi.KeysQuery) *Error {
	switch {
	case q.Policy == "" && q.Plan == "":
		return Invalid("policy", "a listing names a policy (policy=NAME) or a plan (plan=NAME)")
	case q.Policy != "" && q.Plan != "":
		return Invalid("plan", "name a policy or a plan, not both")
	case q.Policy != "":
		if e := ValidatePolicyName(q.Policy, "policy"); e != nil {
			return e
		}
		if q.PlanLimit != "" {
			return Invalid("plan_limit", "only with plan=NAME")
		}
	default:
		if e := ValidatePolicyName(q.Plan, "plan"); e != nil {
			return e
		}
		if q.PlanLimit != "" {
			if e := ValidatePlanLimitName(q.PlanLimit, "plan_limit"); e != nil {
				return e
			}
		}
	}
	switch {
	case len(q.Prefix) > MaxKeyBytes:
		return Invalid("prefix", "must be at most "+strconv.Itoa(MaxKeyBytes)+" bytes, got "+strconv.Itoa(len(q.Prefix)))
	case !utf8.ValidString(q.Prefix):
		return Invalid("prefix", "must be valid UTF-8")
	}
	switch q.Sort {
	case nodeapi.SortKey, nodeapi.SortUsed, nodeapi.SortRemaining, nodeapi.SortRefused:
	default:
		return Invalid("sort", "must be used, remaining or refused (absent: key order), got "+strconv.Quote(q.Sort))
	}
	if q.Limit < 1 || q.Limit > nodeapi.MaxKeysLimit {
		return Invalid("limit", "must be 1 to "+strconv.Itoa(nodeapi.MaxKeysLimit)+", got "+strconv.Itoa(q.Limit))
	}
	if len(q.Cursor) > maxCursorBytes {
		return Invalid("cursor", "not a cursor this listing returned (too long)")
	}
	return nil
}

// ListKeys answers one page of the usage inventory from this node's state.
// Errors: invalid_argument naming the field, not_found naming policy, plan
// or plan_limit; internal for a storage failure.
func (s *Service) ListKeys(q nodeapi.KeysQuery) (nodeapi.KeysPage, *Error) {
	if e := ValidateKeysQuery(q); e != nil {
		return nodeapi.KeysPage{}, e
	}
	p, err := s.deps.Inventory.ListKeys(q)
	if err != nil {
		return nodeapi.KeysPage{}, fromNode(err, "")
	}
	return p, nil
}
