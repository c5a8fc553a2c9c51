package grpcapi

import (
	"google.golang.org/grpc/metadata"

	"github.com/limitd/limitd/nodeapi"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// WatchEvents: the alert events on gRPC, what GET /v1/events streams
// (api/events.go): the same events, ids and types, the same resume, the
// same bound (service.MaxEventStreams streams a node, each with the
// service's buffer: a consumer too slow for it misses events, the apply
// never waits for it). Admin, by the stream interceptor (adminMethods).

func init() {
	adminMethods["/limitd.v1.Limitd/WatchEvents"] = true
}

func (l *limitdServer) WatchEvents(req *limitdv1.WatchEventsRequest, stream limitdv1.Limitd_WatchEventsServer) error {
	st, backlog, e := l.svc().SubscribeEvents(req.GetAfterId())
	if e != nil {
		return toStatus(e)
	}
	defer st.Close()
	// The header says the subscription is in place: an event applied after
	// the client holds it is on the stream (what SSE's first comment says).
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	sent := req.GetAfterId()
	send := func(ev nodeapi.Event) error {
		if ev.Seq <= sent {
			return nil // in the backlog and applied since: sent once
		}
		sent = ev.Seq
		return stream.Send(&limitdv1.Event{Id: ev.Seq, Type: service.EventType(ev.Body), Data: string(ev.Body)})
	}
	for _, ev := range backlog {
		if err := send(ev); err != nil {
			return err
		}
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-st.Done:
			return nil
		case ev := <-st.C:
			if err := send(ev); err != nil {
				return err
			}
		}
	}
}
