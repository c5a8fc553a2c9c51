package service

import (
	"context"
	"fmt"

	"github.com/limitd/limitd/nodeapi"
)

// Backuper is the Node's consistent snapshot of its replicated state, for
// streaming (GET /v1/cluster/snapshot).
type Backuper interface {
	OpenBackup(ctx context.Context) (nodeapi.Backup, error)
}

// Digester is the Node's fingerprint of its replicated state; replicas that
// applied the same log agree on it.
type Digester interface {
	Digest() (digest string, appliedIndex uint64, err error)
}

// OpenBackup opens a backup of this node's replicated state for streaming;
// the caller closes it. Errors: unavailable (naming the cause) when the node
// cannot take one now.
func (s *Service) OpenBackup(ctx context.Context) (nodeapi.Backup, *Error) {
	ctx, cancel := s.context(ctx)
	defer cancel()
	bk, err := s.deps.Backuper.OpenBackup(ctx)
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: err.Error()}
	}
	return bk, nil
}

// Digest fingerprints this node's replicated state with the index it
// reflects (GET /v1/cluster/digest). Errors are internal.
func (s *Service) Digest() (digest string, appliedIndex uint64, e *Error) {
	digest, appliedIndex, err := s.deps.Digester.Digest()
	if err != nil {
		return "", 0, Internal(fmt.Sprintf("digest: %v", err))
	}
	return digest, appliedIndex, nil
}
