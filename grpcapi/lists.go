package grpcapi

import (
	"context"
	"time"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// Lists and bans: translation only (service/lists.go, service/bans.go); every
// method is admin (adminMethods).

func listProto(l service.ListRequest) *limitdv1.List {
	out := &limitdv1.List{Name: l.Name, Kind: l.Kind, Policies: l.Policies, Entries: make([]*limitdv1.ListEntry, len(l.Entries))}
	for i, e := range l.Entries {
		out.Entries[i] = &limitdv1.ListEntry{Key: e.Key, Prefix: e.Prefix, Cidr: e.CIDR, Expires: e.Expires}
	}
	return out
}

func (l *limitdServer) PutList(ctx context.Context, req *limitdv1.PutListRequest) (*limitdv1.List, error) {
	in := req.GetList()
	r := service.ListRequest{Name: in.GetName(), Kind: in.GetKind(), Policies: in.GetPolicies(), Entries: make([]service.ListEntry, len(in.GetEntries()))}
	for i, e := range in.GetEntries() {
		r.Entries[i] = service.ListEntry{Key: e.GetKey(), Prefix: e.GetPrefix(), CIDR: e.GetCidr(), Expires: e.GetExpires()}
	}
	out, e := l.svc().PutList(ctx, r)
	if e != nil {
		return nil, toStatus(e.Under("list"))
	}
	return listProto(out), nil
}

func (l *limitdServer) GetList(ctx context.Context, req *limitdv1.GetListRequest) (*limitdv1.List, error) {
	out, e := l.svc().GetList(req.GetName())
	if e != nil {
		return nil, toStatus(e)
	}
	return listProto(out), nil
}

func (l *limitdServer) ListLists(ctx context.Context, req *limitdv1.ListListsRequest) (*limitdv1.ListListsResponse, error) {
	ls, e := l.svc().ListLists()
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.ListListsResponse{Lists: make([]*limitdv1.List, len(ls))}
	for i, x := range ls {
		out.Lists[i] = listProto(x)
	}
	return out, nil
}

func (l *limitdServer) DeleteList(ctx context.Context, req *limitdv1.DeleteListRequest) (*limitdv1.DeleteListResponse, error) {
	if e := l.svc().DeleteList(ctx, req.GetName()); e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.DeleteListResponse{}, nil
}

func (l *limitdServer) ListBans(ctx context.Context, req *limitdv1.ListBansRequest) (*limitdv1.ListBansResponse, error) {
	if req.GetLimit() < 0 {
		return nil, toStatus(service.Invalid("limit", "must be 0 (the default) or positive"))
	}
	bans, next, e := l.svc().ListBans(req.GetCursor(), int(req.GetLimit()))
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.ListBansResponse{NextCursor: next, Bans: make([]*limitdv1.Ban, len(bans))}
	for i, b := range bans {
		out.Bans[i] = &limitdv1.Ban{Key: b.Key, Policy: b.Policy, Until: time.Unix(0, b.Until).UTC().Format(time.RFC3339Nano), Offences: int64(b.Offences)}
	}
	return out, nil
}

func (l *limitdServer) Unban(ctx context.Context, req *limitdv1.UnbanRequest) (*limitdv1.UnbanResponse, error) {
	if e := l.svc().Unban(ctx, req.GetKey(), req.GetPolicy()); e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.UnbanResponse{}, nil
}
