package service

import (
	"strconv"

	"github.com/limitd/limitd/nodeapi"
)

// ValidateInflightQuery checks a work-in-flight read's fields, each error
// naming the query parameter: a key, a policy or a limit of the key's plan
// (not both), max 1 to nodeapi.MaxInflightItems.
func ValidateInflightQuery(q nodeapi.InflightQuery) *Error {
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
	if q.Max < 1 || q.Max > nodeapi.MaxInflightItems {
		return Invalid("max", "must be 1 to "+strconv.Itoa(nodeapi.MaxInflightItems)+", got "+strconv.Itoa(q.Max))
	}
	return nil
}

// Inflight answers a key's held concurrency slots and open reservations
// under a policy or a limit of its plan, from this node's applied state (no
// Raft write). Errors: invalid_argument naming the field, not_found naming
// policy, key or limit; internal for a storage failure or damaged state.
func (s *Service) Inflight(q nodeapi.InflightQuery) (nodeapi.Inflight, *Error) {
	if e := ValidateInflightQuery(q); e != nil {
		return nodeapi.Inflight{}, e
	}
	v, err := s.deps.Usage.Inflight(q)
	if err != nil {
		return nodeapi.Inflight{}, fromNode(err, "")
	}
	// The node lists its own ids; a client settles by the token its reserve
	// answered, which names the key and policy too (reserve.go). Only a
	// policy's keys have reservations: a reserve names a policy or a limit.
	c := nodeapi.Check{Key: q.Key, Policy: q.Policy}
	for i := range v.Reservations {
		if q.Policy != "" {
			v.Reservations[i].Reservation = reservationToken(&c, v.Reservations[i].Reservation)
		}
	}
	return v, nil
}
