package fsm

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/limitd/limitd/algo"

	"github.com/limitd/limitd/nodeapi"
)

// A limit's options block (nodeapi.LimitOptions) follows its spec: after a
// policy's other options when the policy flag policyOptions is set, and
// after the spec inside a plan limit's framed bytes when any is set. It is
// uvarint(count) then, per option in increasing tag order,
// tag ‖ uvarint(len) ‖ body. Each option has one tag; an option is written
// only when set, so a limit without options encodes as before the block
// existed. A tag this binary does not know stops the node, as an unknown
// flag does: a tag may be used only once every node knows it.
//
// Tags in use (one line each, with the file that owns the option):
//
//	'd' degraded: one byte, the DegradedMode; policies only (degraded.go)
//	'h' history: uvarint(ns), LimitOptions.History (history.go)
//	'n' notify: uvarint(count) ‖ uvarint(threshold)… (notify.go)
//	'r' reservation_expiry: one byte, the ReservationExpiry; written only for "return" (reserve.go)
const (
	limitOptDegraded  byte = 'd'
	optHistory        byte = 'h'
	limitOptionNotify byte = 'n'
	optResExpiry      byte = 'r'

	limitOptionsMax = 16 // options in one block: more is damage
)

// appendLimitOptions appends o's block; it writes nothing when o is zero.
func appendLimitOptions(dst []byte, o *nodeapi.LimitOptions) []byte {
	if o.IsZero() {
		return dst
	}
	type opt struct {
		tag  byte
		body []byte
	}
	var opts []opt // in increasing tag order
	if o.Degraded != nodeapi.DegradedNone {
		opts = append(opts, opt{limitOptDegraded, []byte{byte(o.Degraded)}})
	}
	if o.History > 0 {
		opts = append(opts, opt{optHistory, binary.AppendUvarint(nil, uint64(o.History))})
	}
	if o.Notify[0] != 0 {
		opts = append(opts, opt{limitOptionNotify, appendNotify(nil, &o.Notify)})
	}
	if o.ReservationExpiry != nodeapi.ExpirySettle {
		opts = append(opts, opt{optResExpiry, []byte{byte(o.ReservationExpiry)}})
	}
	dst = binary.AppendUvarint(dst, uint64(len(opts)))
	for _, x := range opts {
		dst = append(dst, x.tag)
		dst = binary.AppendUvarint(dst, uint64(len(x.body)))
		dst = append(dst, x.body...)
	}
	return dst
}

// decodeLimitOptions reads appendLimitOptions output. A block that is well
// framed but whose content is invalid is returned as invalid (an answer to
// the command, not a reason to stop the node); bad framing, a repeated or
// out-of-order tag and an unknown tag fail the decoder.
func decodeLimitOptions(d *decoder) (o nodeapi.LimitOptions, invalid error) {
	n := d.count(2)
	if d.err == nil && n == 0 {
		d.fail(fmt.Errorf("limit options: empty block"))
	}
	if n > limitOptionsMax {
		d.fail(fmt.Errorf("limit options: %d options", n))
	}
	last := -1
	for i := 0; i < n && d.err == nil; i++ {
		tag := d.byte()
		body := d.bytes()
		if d.err != nil {
			break
		}
		if int(tag) <= last {
			d.fail(fmt.Errorf("limit options: tag %#x out of order", tag))
			break
		}
		last = int(tag)
		switch tag {
		case limitOptDegraded:
			// A mode this binary does not know stops the node, as a tag does.
			if len(body) != 1 || body[0] == 0 || nodeapi.DegradedMode(body[0]) > nodeapi.DegradedShare {
				d.fail(fmt.Errorf("limit options: degraded mode %x", body))
				break
			}
			o.Degraded = nodeapi.DegradedMode(body[0])
		case limitOptionNotify:
			var bad error
			if o.Notify, bad = decodeNotify(body); bad != nil && invalid == nil {
				invalid = bad
			}
		case optHistory:
			v, n := binary.Uvarint(body)
			switch {
			case n <= 0 || n != len(body):
				d.fail(fmt.Errorf("limit options: history: bad encoding"))
			case v == 0 || v > uint64(nodeapi.MaxHistory):
				if invalid == nil {
					invalid = &algo.FieldError{Field: "history", Message: fmt.Sprintf("must be more than 0 and at most %s", algo.FormatWindow(nodeapi.MaxHistory))}
				}
			default:
				o.History = time.Duration(v)
			}
		case optResExpiry:
			// Only "return" is written; any other byte is damage or a mode
			// this binary does not know: either stops the node.
			if len(body) != 1 || nodeapi.ReservationExpiry(body[0]) != nodeapi.ExpiryReturn {
				d.fail(fmt.Errorf("limit options: reservation expiry %x", body))
				break
			}
			o.ReservationExpiry = nodeapi.ExpiryReturn
		default:
			_ = body
			d.fail(fmt.Errorf("limit options: unknown tag %#x", tag))
		}
	}
	return o, invalid
}
