package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/limitd/limitd/client"
)

// The Go client's errors land in the same report classes as the HTTP
// target's.
func TestClientErrorClasses(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want ErrorClass
	}{
		{&client.Error{Status: 400, Code: client.CodeInvalidArgument}, Err4xx},
		{&client.Error{Status: 503, Code: client.CodeUnavailable}, Err5xx},
		{fmt.Errorf("check: %w", client.ErrUnavailable), Err5xx},
		{fmt.Errorf("check: %w", context.DeadlineExceeded), ErrTimeout},
		{errors.New("odd"), ErrOther},
	} {
		if got := Classify(clientError(tc.err)); got != tc.want {
			t.Errorf("%v: class %s, want %s", tc.err, got, tc.want)
		}
	}
}
