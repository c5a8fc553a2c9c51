package fsm

import (
	"encoding/binary"
	"fmt"
)

// A request-id record binds the id to the request it was first used for, so
// that a reuse with different content is refused (CodeConflict) instead of
// being answered with another request's decision. The record is the value
// persist stores under the id:
//
//	requestRecordVersion ‖ flags ‖ uvarint(checks) ‖ keys(8) ‖ limits(8) ‖ costs(8) ‖ results
//
// keys, limits and costs are FNV-1a 64 hashes over every check of the op, in
// order, each field length-prefixed; they cover only the entry's bytes, so
// every replica computes the same record. This is the first released format
// (docs/COMPATIBILITY.md): a record that does not start with its version is
// corrupt.
const requestRecordVersion byte = 0x82

const fpFlagAll byte = 1

// fingerprint identifies an op for its request id.
type fingerprint struct {
	all                 bool
	checks              uint64
	keys, limits, costs uint64
}

const (
	fnvOffset64 uint64 = 14695981039346656037
	fnvPrime64  uint64 = 1099511628211
)

func fnvBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

// fnvField hashes len(b) then b, so that field boundaries count.
func fnvField(h uint64, b []byte) uint64 {
	var l [binary.MaxVarintLen64]byte
	return fnvBytes(fnvBytes(h, l[:binary.PutUvarint(l[:], uint64(len(b)))]), b)
}

func fingerprintOf(op *opRef, checks []checkRef) fingerprint {
	fp := fingerprint{all: op.all, checks: uint64(len(checks)), keys: fnvOffset64, limits: fnvOffset64, costs: fnvOffset64}
	var n [binary.MaxVarintLen64]byte
	for i := range checks {
		ck := &checks[i]
		fp.keys = fnvField(fp.keys, ck.key)
		fp.limits = (fp.limits ^ uint64(ck.kind)) * fnvPrime64
		fp.limits = fnvField(fp.limits, ck.policy)
		fp.limits = fnvField(fp.limits, ck.spec)
		fp.limits = ck.costs.fingerprint(fp.limits) // reserve.go
		fp.costs = fnvBytes(fp.costs, n[:binary.PutVarint(n[:], ck.cost)])
	}
	return fp
}

// appendRequestRecord writes a record of fp and the op's result r.
func appendRequestRecord(dst []byte, fp fingerprint, r *Result) []byte {
	var flags byte
	if fp.all {
		flags |= fpFlagAll
	}
	dst = append(dst, requestRecordVersion, flags)
	dst = binary.AppendUvarint(dst, fp.checks)
	dst = binary.BigEndian.AppendUint64(dst, fp.keys)
	dst = binary.BigEndian.AppendUint64(dst, fp.limits)
	dst = binary.BigEndian.AppendUint64(dst, fp.costs)
	dst = append(dst, resultsVersion, 1)
	return appendResult(dst, r)
}

// decodeRequestRecord reads a record.
func decodeRequestRecord(b []byte) (fp fingerprint, r Result, err error) {
	if len(b) < 2 || b[0] != requestRecordVersion {
		return fp, r, fmt.Errorf("request record of %d bytes without its version", len(b))
	}
	fp.all = b[1]&fpFlagAll != 0
	if b[1]&^(fpFlagAll|fpFlagSpent) != 0 {
		return fp, r, fmt.Errorf("request record: unknown flags %#x", b[1])
	}
	b0 := b[1]
	n, w := binary.Uvarint(b[2:])
	if w <= 0 || len(b) < 2+w+24 {
		return fp, r, fmt.Errorf("request record: short fingerprint")
	}
	b = b[2+w:]
	fp.checks = n
	fp.keys = binary.BigEndian.Uint64(b)
	fp.limits = binary.BigEndian.Uint64(b[8:])
	fp.costs = binary.BigEndian.Uint64(b[16:])
	b = b[24:]
	if flags := b0; flags&fpFlagSpent != 0 { // reserve.go: what the request spent, for refunds
		_, n, err := decodeSpent(b)
		if err != nil {
			return fp, r, fmt.Errorf("request record: %v", err)
		}
		b = b[n:]
	}
	rs, err := DecodeResults(b)
	if err != nil {
		return fp, r, err
	}
	if len(rs) != 1 {
		return fp, r, fmt.Errorf("request record holds %d results", len(rs))
	}
	return fp, rs[0], nil
}

// requestConflict names the first field in which the op differs from the one
// its request id was first used for, or returns nil when they match.
func requestConflict(was, now fingerprint, checks []checkRef) *Error {
	conflict := func(field, what string) *Error {
		return &Error{Code: CodeConflict, Field: field, Message: "this request_id was first used for a request with " + what +
			"; a retry must repeat the request exactly: use a new request_id for a new request"}
	}
	// A single check's fields are named as such; in a group the checks
	// together differ, and "checks" is as precise as the hashes allow.
	single := now.checks == 1 && was.checks == 1
	name := func(field string) string {
		if single {
			return field
		}
		return "checks"
	}
	switch {
	case was.all != now.all || was.checks != now.checks:
		what := fmt.Sprintf("%d check(s)", was.checks)
		if was.all {
			what += " decided all-or-nothing"
		}
		return conflict("request_id", what)
	case was.keys != now.keys:
		return conflict(name("key"), "a different key")
	case was.limits != now.limits:
		field := "limit"
		if single && checks[0].kind&limitPolicy != 0 {
			field = "policy"
		}
		return conflict(name(field), "a different policy or limit")
	case was.costs != now.costs:
		return conflict(name("cost"), "a different cost")
	}
	return nil
}
