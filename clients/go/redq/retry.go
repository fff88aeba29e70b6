// Retry policy shared by the Publisher and the Subscriber: which errors are
// worth another try, and the backoff between tries.

package redq

import (
	"context"
	"math/rand"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Backoff is the exponential backoff between retries: Initial, then doubled
// on each try up to Max, each wait drawn at random between half and all of it
// (so that many clients cut off together do not come back together).
type Backoff struct {
	Initial time.Duration // default 100 ms
	Max     time.Duration // default 5 s
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 100 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 5 * time.Second
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	return b
}

// delay is the wait before retry number attempt (1 for the first retry).
func (b Backoff) delay(attempt int) time.Duration {
	d := b.Initial
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	jitterMu.Lock()
	f := jitter.Float64()
	jitterMu.Unlock()
	return d/2 + time.Duration(f*float64(d/2))
}

var (
	jitterMu sync.Mutex
	jitter   = rand.New(rand.NewSource(time.Now().UnixNano()))
)

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// retryable reports whether a failed stream or request may succeed when
// tried again. The codes that say the request itself is wrong (a bad field,
// an unknown subscription, no permission…) are final; the others (the server
// is unavailable or overloaded, the connection broke) are not.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.Unauthenticated, codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented:
		return false
	}
	return true
}
