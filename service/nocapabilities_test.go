package service

import (
	"context"
	"errors"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/overlimit"
)

// noCapabilities gives a fake node every capability of Node answered as a
// node without it would: no leader known, no cached refusal, no lease
// granted, no RLS domain, no backup or digest. Fakes embed it and override
// what their test is about.
type noCapabilities struct{}

var errNotInFake = errors.New("not supported by this fake node")

func (noCapabilities) LeaderID() (string, bool)         { return "", false }
func (noCapabilities) LeaderHTTPAddr() (string, string) { return "", "" }
func (noCapabilities) Refused(overlimit.LimitID, string, int64) (algo.Decision, bool) {
	return algo.Decision{}, false
}
func (noCapabilities) GrantLeases(context.Context, []nodeapi.LeaseRequest) ([]nodeapi.LeaseGrant, error) {
	return nil, errNotInFake
}
func (noCapabilities) ReturnLeases(context.Context, []nodeapi.LeaseReturn) ([]int64, error) {
	return nil, errNotInFake
}
func (noCapabilities) SetLeaseHook(nodeapi.LeaseHook)        {}
func (noCapabilities) RLSDomainConfig(string) ([]byte, bool) { return nil, false }
func (noCapabilities) RLSDomains() []nodeapi.Domain          { return nil }
func (noCapabilities) RLSDomainsVersion() uint64             { return 0 }
func (noCapabilities) PutRLSDomain(context.Context, string, []byte) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node serves no RLS domains"}
}
func (noCapabilities) DeleteRLSDomain(context.Context, string) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node serves no RLS domains"}
}
func (noCapabilities) OpenBackup(context.Context) (nodeapi.Backup, error) { return nil, errNotInFake }
func (noCapabilities) Digest() (string, uint64, error)                    { return "", 0, errNotInFake }
func (noCapabilities) List(string) ([]byte, bool)                         { return nil, false }
func (noCapabilities) Lists() []nodeapi.List                              { return nil }
func (noCapabilities) ListsVersion() uint64                               { return 0 }
func (noCapabilities) PutList(context.Context, string, []byte) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node keeps no lists"}
}
func (noCapabilities) DeleteList(context.Context, string) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node keeps no lists"}
}
func (noCapabilities) LeaderTime() int64                        { return time.Now().UnixNano() }
func (noCapabilities) Banned(string, string) (int64, bool)      { return 0, false }
func (noCapabilities) Bans(string, int) ([]nodeapi.Ban, string) { return nil, "" }
func (noCapabilities) Unban(context.Context, string, string) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node bans nobody"}
}
