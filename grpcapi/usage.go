package grpcapi

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/limitd/limitd/nodeapi"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// Usage history and top keys on gRPC (docs/API.md, "Usage history"):
// translation only, as the HTTP routes (api/usage.go).

func init() {
	for _, m := range []string{"GetUsage", "ExportUsage", "TopKeys"} {
		adminMethods["/limitd.v1.Limitd/"+m] = true
	}
}

func ts(ns int64) *timestamppb.Timestamp { return timestamppb.New(time.Unix(0, ns)) }

func (l *limitdServer) GetUsage(_ context.Context, req *limitdv1.GetUsageRequest) (*limitdv1.GetUsageResponse, error) {
	q := nodeapi.UsageQuery{Key: req.GetKey(), Policy: req.GetPolicy(), Limit: req.GetLimit(), Max: int(req.GetWindows())}
	if q.Max == 0 {
		q.Max = nodeapi.MaxUsageWindows
	}
	if req.From != nil {
		q.From = req.GetFrom().AsTime().UnixNano()
	}
	if req.To != nil {
		q.To = req.GetTo().AsTime().UnixNano()
	}
	h, e := l.svc().KeyUsage(q)
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.GetUsageResponse{Key: h.Key, Policy: h.Policy, Plan: h.Plan, Limit: h.Limit, History: service.FormatHistory(h.History),
		AppliedIndex: h.AppliedIndex, Windows: make([]*limitdv1.UsageWindow, len(h.Windows))}
	for i, w := range h.Windows {
		out.Windows[i] = &limitdv1.UsageWindow{Start: ts(w.Start), End: ts(w.End), Used: w.Used, Refused: w.Refused, Current: w.Current}
	}
	return out, nil
}

// ExportUsage streams a closed window: the header, then a row per key. Its
// admin check is here: the unary interceptor does not see streams.
func (l *limitdServer) ExportUsage(req *limitdv1.ExportUsageRequest, stream limitdv1.Limitd_ExportUsageServer) error {
	if l.s.cfg.AdminToken != "" && !l.s.adminOK(stream.Context()) {
		return toStatus(&service.Error{Code: service.CodeUnauthenticated,
			Message: "this method needs the admin token: metadata \"authorization: Bearer <token>\""})
	}
	q := nodeapi.ExportQuery{Policy: req.GetPolicy(), Plan: req.GetPlan(), PlanLimit: req.GetPlanLimit()}
	if req.Window != nil {
		q.Window = req.GetWindow().AsTime().UnixNano()
	}
	e := l.svc().ExportUsage(q, func(h nodeapi.ExportHeader) error {
		return stream.Send(&limitdv1.ExportUsageMessage{Item: &limitdv1.ExportUsageMessage_Header_{
			Header: &limitdv1.ExportUsageMessage_Header{Start: ts(h.Start), End: ts(h.End), AppliedIndex: h.AppliedIndex}}})
	}, func(r nodeapi.ExportRow) error {
		return stream.Send(&limitdv1.ExportUsageMessage{Item: &limitdv1.ExportUsageMessage_Row_{
			Row: &limitdv1.ExportUsageMessage_Row{Key: r.Key, Used: r.Used, Refused: r.Refused}}})
	})
	if e != nil {
		return toStatus(e)
	}
	return nil
}

func (l *limitdServer) TopKeys(_ context.Context, req *limitdv1.TopKeysRequest) (*limitdv1.TopKeysResponse, error) {
	q := nodeapi.TopKeysQuery{Policy: req.GetPolicy(), Plan: req.GetPlan(), PlanLimit: req.GetPlanLimit(), By: req.GetBy(), Limit: int(req.GetLimit())}
	if q.By == "" {
		q.By = nodeapi.TopByAllowed
	}
	if q.Limit == 0 {
		q.Limit = 10
	}
	switch req.GetWindow() {
	case "5m":
		q.Window = 5 * time.Minute
	case "1h":
		q.Window = time.Hour
	default:
		return nil, toStatus(service.Invalid("window", "must be 5m or 1h"))
	}
	v, e := l.svc().TopKeys(q)
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.TopKeysResponse{Policy: v.Policy, Plan: v.Plan, PlanLimit: v.PlanLimit, Window: req.GetWindow(), By: v.By, At: ts(v.Now), Keys: make([]*limitdv1.TopKey, len(v.Keys))}
	for i, k := range v.Keys {
		out.Keys[i] = &limitdv1.TopKey{Key: k.Key, Count: k.Count, Error: k.Error}
	}
	return out, nil
}
