package api

import (
	"encoding/json"

	"github.com/limitd/limitd/service"
)

// Releases, renewals and settles are the second half of a guarded request,
// one per acquire or reserve, and encoding/json by reflection cost more to
// read them than the rest of their handling (the envelope's map, a raw
// message per item, a Decoder per item). The readers here are fastCheck's
// for their bodies: the shape clients send, exact member names each at most
// once, strings without escapes in valid UTF-8, integers within int64, and
// nothing else; anything else falls back to scanJSON and encoding/json,
// which stay the reference for what is accepted and own every error message
// (fastpair_test.go holds the two equal on every body).

// fastSlotJSON is slotJSON as spans of the body.
type fastSlotJSON struct {
	key, policy, limit, slot []byte
}

// fastSettleJSON is settleJSON as spans of the body; the cost is required
// (a missing or null one is left to the slow path, which names it).
type fastSettleJSON struct {
	reservation []byte
	cost        int64
}

// Members of a release or renewal, and of a settle, as bits of those read.
const (
	memberSlot = memberLimit << (1 + iota)
	memberReservation
)

// slotItem reads one release or renewal object.
func (p *fastParser) slotItem(out *fastSlotJSON) bool {
	return p.members(func(name []byte) (uint8, bool) {
		switch string(name) {
		case "key":
			v, ok := p.str()
			out.key = v
			return memberKey, ok
		case "policy":
			v, ok := p.str()
			out.policy = v
			return memberPolicy, ok
		case "slot":
			v, ok := p.str()
			out.slot = v
			return memberSlot, ok
		case "limit":
			if p.literal("null") {
				out.limit = nil
				return memberLimit, true
			}
			v, ok := p.object()
			out.limit = v
			return memberLimit, ok
		}
		return 0, false
	})
}

// settleItem reads one settle object; it must name its cost.
func (p *fastParser) settleItem(out *fastSettleJSON) bool {
	var seen uint8
	ok := p.members(func(name []byte) (uint8, bool) {
		switch string(name) {
		case "reservation":
			v, ok := p.str()
			out.reservation = v
			return memberReservation, ok
		case "cost":
			seen |= memberCost
			v, ok := p.int()
			out.cost = v
			return memberCost, ok
		}
		return 0, false
	})
	return ok && seen&memberCost != 0
}

// members reads an object whose members member reads (the value, and the
// member's bit; false: not this shape), each at most once.
func (p *fastParser) members(member func(name []byte) (uint8, bool)) bool {
	if !p.byte('{') {
		return false
	}
	p.ws()
	if p.byte('}') {
		return true
	}
	var seen uint8
	for {
		name, ok := p.str()
		if !ok {
			return false
		}
		p.ws()
		if !p.byte(':') {
			return false
		}
		p.ws()
		m, ok := member(name)
		if !ok || seen&m != 0 {
			return false
		}
		seen |= m
		p.ws()
		if p.byte('}') {
			return true
		}
		if !p.byte(',') {
			return false
		}
		p.ws()
	}
}

// fastItems reads a batch envelope {"<field>":[item, ...]} with no other
// member and 1 to max items, item reading each; false for anything else
// (an empty or oversized batch included: the slow path names the error).
func fastItems(data []byte, field string, max int, item func(p *fastParser) bool) bool {
	p := fastParser{data: data}
	p.ws()
	if !p.byte('{') {
		return false
	}
	p.ws()
	if name, ok := p.str(); !ok || string(name) != field {
		return false
	}
	p.ws()
	if !p.byte(':') {
		return false
	}
	p.ws()
	if !p.byte('[') {
		return false
	}
	for n := 0; ; n++ {
		p.ws()
		if n == max || !item(&p) {
			return false
		}
		p.ws()
		if p.byte(']') {
			break
		}
		if !p.byte(',') {
			return false
		}
	}
	p.ws()
	return p.byte('}') && p.end()
}

// fastSlot decodes body as one release or renewal when fastParser reads it.
func fastSlot(body []byte, out *fastSlotJSON) bool {
	p := fastParser{data: body}
	p.ws()
	return p.slotItem(out) && p.end()
}

// fastSettle decodes body as one settle when fastParser reads it.
func fastSettle(body []byte, out *fastSettleJSON) bool {
	p := fastParser{data: body}
	p.ws()
	return p.settleItem(out) && p.end()
}

// decodeSlotBatch decodes a release or renewal batch (field "releases" or
// "renewals"): the requests, and per item the errors of those that could
// not be decoded (located); e when the envelope is wrong.
func (s *Server) decodeSlotBatch(body []byte, field string) (rs []service.SlotRequest, errs []*service.Error, e *apiError) {
	items := make([]fastSlotJSON, 0, 16)
	if fastItems(body, field, s.maxBatch, func(p *fastParser) bool {
		items = append(items, fastSlotJSON{})
		return p.slotItem(&items[len(items)-1])
	}) {
		rs, errs = eachItem(items, field, func(f fastSlotJSON) (service.SlotRequest, *apiError) { return s.slotFrom(&f) })
		return rs, errs, nil
	}
	raws, e := s.costBatchItems(body, field)
	if e != nil {
		return nil, nil, e
	}
	rs, errs = eachItem(raws, field, func(raw json.RawMessage) (service.SlotRequest, *apiError) { return s.slotRequest(raw) })
	return rs, errs, nil
}

// decodeSettleBatch is decodeSlotBatch for a settle batch ("settles").
func (s *Server) decodeSettleBatch(body []byte) (rs []service.SettleRequest, errs []*service.Error, e *apiError) {
	const field = "settles"
	items := make([]fastSettleJSON, 0, 16)
	if fastItems(body, field, s.maxBatch, func(p *fastParser) bool {
		items = append(items, fastSettleJSON{})
		return p.settleItem(&items[len(items)-1])
	}) {
		rs = make([]service.SettleRequest, len(items))
		for i := range items {
			rs[i] = service.SettleRequest{Reservation: string(items[i].reservation), Cost: items[i].cost}
		}
		return rs, nil, nil
	}
	raws, e := s.costBatchItems(body, field)
	if e != nil {
		return nil, nil, e
	}
	rs, errs = eachItem(raws, field, func(raw json.RawMessage) (service.SettleRequest, *apiError) { return settleRequest(raw) })
	return rs, errs, nil
}

// eachItem builds the request of every item of a batch's field, and the
// located error (field[i]…) of each that has one, nil when none has.
func eachItem[T, R any](items []T, field string, build func(T) (R, *apiError)) ([]R, []*service.Error) {
	rs := make([]R, len(items))
	var errs []*service.Error
	for i := range items {
		var e *apiError
		if rs[i], e = build(items[i]); e != nil {
			if errs == nil {
				errs = make([]*service.Error, len(items))
			}
			errs[i] = e.serviceError().Under(service.ItemField(field, i))
		}
	}
	return rs, errs
}
