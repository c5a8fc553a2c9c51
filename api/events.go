package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// GET /v1/events: server-sent events, for dashboards. Each event this
// node's replica applies is sent as it is applied:
//
//	id: <the event's place in the outbox>
//	event: <type: threshold or ban>
//	data: <the JSON object webhooks receive>
//
// The SSE id is the outbox seq, the same on every node: a client that
// reconnects with Last-Event-ID gets first the events still in the outbox
// after it (the ones not yet delivered to every webhook), then the live
// ones. A comment line every eventHeartbeat keeps proxies from closing an
// idle stream. A node serves at most service.MaxEventStreams streams.

// eventHeartbeat is the idle stream's keep-alive; each write gets
// eventWriteTimeout, in place of the server's write timeout.
const (
	eventHeartbeat    = 15 * time.Second
	eventWriteTimeout = 10 * time.Second
)

func (s *Server) handleEvents(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	var after uint64
	if v := req.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, invalid("Last-Event-ID", "must be an event id this stream sent, got "+quoteValue(v)))
			return
		}
		after = n
	}
	st, backlog, e := s.svc.SubscribeEvents(after)
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	defer st.Close()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var buf []byte
	send := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	sent := after
	event := func(ev nodeapi.Event) bool {
		if ev.Seq <= sent {
			return true // in the backlog and applied since: sent once
		}
		sent = ev.Seq
		buf = appendSSE(buf[:0], ev)
		return send(buf)
	}
	if !send([]byte(": limitd events\n\n")) {
		return
	}
	for _, ev := range backlog {
		if !event(ev) {
			return
		}
	}
	tick := time.NewTicker(eventHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-req.Context().Done():
			return
		case <-st.Done:
			return
		case ev := <-st.C:
			if !event(ev) {
				return
			}
		case <-tick.C:
			if !send([]byte(": ping\n\n")) {
				return
			}
		}
	}
}

// appendSSE writes one event; its body is one line of JSON.
func appendSSE(dst []byte, ev nodeapi.Event) []byte {
	dst = append(dst, "id: "...)
	dst = strconv.AppendUint(dst, ev.Seq, 10)
	dst = append(dst, "\nevent: "...)
	dst = append(dst, service.EventType(ev.Body)...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, ev.Body...)
	return append(dst, "\n\n"...)
}
