package client

import (
	"strconv"
	"time"

	"github.com/limitd/limitd/wire"
)

// The check path builds its JSON by appending into pooled buffers: the body
// is small and fixed in shape, and reflection-based encoding would cost more
// than the rest of the client's work per check. Strings are written raw
// (wire.AppendRawString): keys are exact bytes, and a key that is not UTF-8
// reaches the server as sent, to be refused naming the field.

// appendLimit appends the limit object.
func appendLimit(b []byte, l *Limit) []byte {
	b = append(b, `{"algorithm":`...)
	b = wire.AppendRawString(b, l.Algorithm)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, l.Limit, 10)
	if l.Window != "" {
		b = append(b, `,"window":`...)
		b = wire.AppendRawString(b, l.Window)
	}
	if l.Burst != 0 {
		b = append(b, `,"burst":`...)
		b = strconv.AppendInt(b, l.Burst, 10)
	}
	if l.CountRefused {
		b = append(b, `,"count_refused":true`...)
	}
	if l.Calendar != "" {
		b = append(b, `,"calendar":`...)
		b = wire.AppendRawString(b, l.Calendar)
	}
	if l.Timezone != "" {
		b = append(b, `,"timezone":`...)
		b = wire.AppendRawString(b, l.Timezone)
	}
	if l.Hold != "" {
		b = append(b, `,"hold":`...)
		b = wire.AppendRawString(b, l.Hold)
	}
	if l.MaxHold != "" {
		b = append(b, `,"max_hold":`...)
		b = wire.AppendRawString(b, l.MaxHold)
	}
	return append(b, '}')
}

// appendCheck appends one check object. id is the request_id (may be
// empty); hold, when positive, makes it a reserve held that long.
func appendCheck(b []byte, r *Request, id []byte, hold time.Duration) []byte {
	b = append(b, `{"key":`...)
	b = wire.AppendRawString(b, r.Key)
	if r.Policy != "" {
		b = append(b, `,"policy":`...)
		b = wire.AppendRawString(b, r.Policy)
	}
	if r.Limit != nil {
		b = append(b, `,"limit":`...)
		b = appendLimit(b, r.Limit)
	}
	if r.Cost > 1 {
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, r.Cost, 10)
	} else if r.Cost < 0 {
		// Let the server name the field.
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, r.Cost, 10)
	}
	if len(id) > 0 {
		b = append(b, `,"request_id":`...)
		b = wire.AppendRawString(b, string(id))
	}
	if hold > 0 {
		b = append(b, `,"reserve":{"hold":`...)
		b = wire.AppendRawString(b, hold.String())
		b = append(b, '}')
	}
	return append(b, '}')
}
