package service

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/limitd/limitd/nodeapi"
)

type backupNode struct {
	*node
	err error
}

type fakeBackup struct{}

func (fakeBackup) Point() (uint64, uint64)          { return 7, 2 }
func (fakeBackup) WriteTo(io.Writer) (int64, error) { return 0, nil }
func (fakeBackup) Close() error                     { return nil }

func (b *backupNode) OpenBackup(ctx context.Context) (nodeapi.Backup, error) {
	if _, ok := ctx.Deadline(); !ok {
		return nil, errors.New("no deadline: the wait is unbounded")
	}
	if b.err != nil {
		return nil, b.err
	}
	return fakeBackup{}, nil
}

// A backup is opened within the request timeout; a node that cannot take
// one now answers unavailable naming why.
func TestOpenBackup(t *testing.T) {
	n := &backupNode{node: newNode()}
	b, e := New(DepsOf(n), Config{}).OpenBackup(context.Background())
	if e != nil {
		t.Fatal(e)
	}
	if i, term := b.Point(); i != 7 || term != 2 {
		t.Fatalf("Point() = %d, %d", i, term)
	}
	n.err = errors.New("backup: wait for applies: timed out")
	_, e = New(DepsOf(n), Config{}).OpenBackup(context.Background())
	wantErr(t, e, CodeUnavailable, "")
	if e.Message != n.err.Error() {
		t.Fatalf("message %q does not name the cause", e.Message)
	}
}
