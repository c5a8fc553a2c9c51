package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/nodeapi"
)

// Work in flight on a key on HTTP (docs/API.md, "Work in flight"):
// translation only; service/inflight.go validates, the state machine reads.
//
//	GET /v1/keys/{key}/inflight?policy=P|limit=L[&max=N]   (admin)
//	→ {"key":..,"policy"|"plan"+"limit":..,"concurrency":bool,"at":..,
//	   "slots":[{"slot","acquired","expires","expires_in_ms"}],"slots_held":N,
//	   "reservations":[{"reservation","cost","expires","expires_in_ms"}],
//	   "more_reservations":bool,"applied_index":N}

// inflightSuffix is the sub-resource's path suffix. It shares the
// /v1/keys/*key catch-all, read from the escaped path as /plan is: a key
// that itself ends in "/inflight" is reached by encoding its slash.
const inflightSuffix = "/inflight"

// DefaultInflightItems is how many slots and reservations a read lists
// without max.
const DefaultInflightItems = 100

var inflightParams = map[string]bool{"policy": true, "limit": true, "max": true}

// inflightOr serves GET /v1/keys/{key}/inflight (admin: key names and
// their slot ids are for admins, as the key listing is) and passes every
// other GET /v1/keys/... to next.
func (s *Server) inflightOr(next httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
		raw, ok := strings.CutSuffix(strings.TrimPrefix(req.URL.EscapedPath(), "/v1/keys/"), inflightSuffix)
		if !ok || raw == "" {
			next(w, req, ps)
			return
		}
		s.admin(func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
			key, err := url.PathUnescape(raw)
			if err != nil {
				writeError(w, invalid("key", "malformed path: "+err.Error()))
				return
			}
			s.handleInflight(w, req, key)
		})(w, req, ps)
	}
}

type inflightSlotJSON struct {
	Slot        string `json:"slot"`
	Acquired    string `json:"acquired"`
	Expires     string `json:"expires"`
	ExpiresInMS int64  `json:"expires_in_ms"`
}

type inflightReservationJSON struct {
	Reservation string `json:"reservation"`
	Cost        int64  `json:"cost"`
	Expires     string `json:"expires"`
	ExpiresInMS int64  `json:"expires_in_ms"`
}

type inflightJSON struct {
	Key              string                    `json:"key"`
	Policy           string                    `json:"policy,omitempty"`
	Plan             string                    `json:"plan,omitempty"`
	Limit            string                    `json:"limit,omitempty"`
	Concurrency      bool                      `json:"concurrency"`
	At               string                    `json:"at"`
	Slots            []inflightSlotJSON        `json:"slots"`
	SlotsHeld        int                       `json:"slots_held"`
	Reservations     []inflightReservationJSON `json:"reservations"`
	MoreReservations bool                      `json:"more_reservations"`
	AppliedIndex     uint64                    `json:"applied_index"`
}

func rfc3339ms(ns int64) string {
	return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// handleInflight answers a key's held slots and open reservations from this
// node's applied state: expiries are leader times, and expires_in_ms is
// measured from the read's leader time ("at"), not this node's clock.
func (s *Server) handleInflight(w http.ResponseWriter, req *http.Request, key string) {
	ps, ae := queryParams(req.URL.RawQuery, inflightParams, "GET /v1/keys/{key}/inflight takes policy, limit and max")
	if ae != nil {
		writeError(w, ae)
		return
	}
	q := nodeapi.InflightQuery{Key: key, Policy: ps["policy"], Limit: ps["limit"], Max: DefaultInflightItems}
	if v, ok := ps["max"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, invalid("max", "must be a whole number from 1 to "+strconv.Itoa(nodeapi.MaxInflightItems)+", got "+strconv.Quote(v)))
			return
		}
		q.Max = n
	}
	v, e := s.svc.Inflight(q)
	countRead("inflight", e != nil)
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	out := inflightJSON{Key: v.Key, Policy: v.Policy, Plan: v.Plan, Limit: v.Limit, Concurrency: v.Concurrency,
		At: rfc3339ms(v.Now), SlotsHeld: v.SlotsHeld, MoreReservations: v.MoreReservations, AppliedIndex: v.AppliedIndex,
		Slots: make([]inflightSlotJSON, len(v.Slots)), Reservations: make([]inflightReservationJSON, len(v.Reservations))}
	for i, sl := range v.Slots {
		out.Slots[i] = inflightSlotJSON{Slot: sl.Slot, Acquired: rfc3339ms(sl.Acquired), Expires: rfc3339ms(sl.Expires),
			ExpiresInMS: time.Duration(sl.Expires - v.Now).Milliseconds()}
	}
	for i, r := range v.Reservations {
		out.Reservations[i] = inflightReservationJSON{Reservation: r.Reservation, Cost: r.Cost, Expires: rfc3339ms(r.Expires),
			ExpiresInMS: time.Duration(r.Expires - v.Now).Milliseconds()}
	}
	writeValue(w, http.StatusOK, out)
}
