package service

import (
	"context"
	"fmt"

	"github.com/limitd/limitd/nodeapi"
)

// Backuper is implemented by a Node that can stream a consistent snapshot
// of its replicated state (cluster.Node does).
type Backuper interface {
	OpenBackup(ctx context.Context) (nodeapi.Backup, error)
}

// Digester is implemented by a Node that can fingerprint its replicated
// state (cluster.Node does); replicas that applied the same log agree on it.
type Digester interface {
	Digest() (digest string, appliedIndex uint64, err error)
}

// OpenBackup opens a backup of this node's replicated state for streaming;
// the caller closes it. Errors: internal when the node cannot take backups,
// unavailable (naming the cause) when it cannot take one now.
func (s *Service) OpenBackup(ctx context.Context) (nodeapi.Backup, *Error) {
	b, ok := s.node.(Backuper)
	if !ok {
		return nil, Internal("this store cannot take backups")
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	bk, err := b.OpenBackup(ctx)
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: err.Error()}
	}
	return bk, nil
}

// Digest fingerprints this node's replicated state with the index it
// reflects (GET /v1/cluster/digest). Errors are internal.
func (s *Service) Digest() (digest string, appliedIndex uint64, e *Error) {
	d, ok := s.node.(Digester)
	if !ok {
		return "", 0, Internal("this store cannot compute a digest")
	}
	digest, appliedIndex, err := d.Digest()
	if err != nil {
		return "", 0, Internal(fmt.Sprintf("digest: %v", err))
	}
	return digest, appliedIndex, nil
}
