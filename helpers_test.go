package bq

import (
	"context"
	"testing"
	"time"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// raceLate is how late a test may see something happen, beyond the time
// the code under test is allowed, before a wall-clock bound fails it. go
// test -race ./... (the README's command, and CI's) runs two packages' test
// binaries at once on a two-core machine, each several times slower under
// the race detector, and each test here runs four servers in its process:
// a goroutine may wait a second or more to run after it could. A bound
// adds it only where the broken behaviour the bound tells apart takes
// longer still, and says what that behaviour would take; where it does
// not, an event replaces the bound, or the bound is the least time the
// broken behaviour takes.
const raceLate = 3 * time.Second

// ctxFor is a context that ends after d, cancelled when the test ends.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lockResult is what one Lock returned.
type lockResult struct {
	h   *Holding
	err error
}

// lockAsync runs Lock on name in a goroutine and delivers its result.
func lockAsync(ctx context.Context, c *Client, name string) <-chan lockResult {
	out := make(chan lockResult, 1)
	go func() {
		h, err := c.Mutex(name).Lock(ctx)
		out <- lockResult{h, err}
	}()
	return out
}

// await waits for a lockResult (failing the test after waitTimeout).
func await(t *testing.T, ch <-chan lockResult) lockResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitTimeout):
		t.Fatal("Lock did not return")
		return lockResult{}
	}
}

// pending fails the test if ch already delivered a result.
func pending(t *testing.T, ch <-chan lockResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned early: holding %v, err %v", what, r.h != nil, r.err)
	default:
	}
}

// lockStatus asks c for lock's status and requires every server to answer.
func lockStatus(t *testing.T, c *Client, lock string) *LockStatus {
	t.Helper()
	st, err := c.Status(ctxFor(t, waitTimeout), lock)
	require.NoError(t, err)
	require.Equal(t, st.N, st.Reachable, "every server should answer")
	require.NotNil(t, st.Lock)
	return st.Lock
}

// waitStatus polls observer's status of lock until cond holds. Each poll is
// a full round trip to every server: it waits on the servers' state, not on
// a guess at timing.
func waitStatus(t *testing.T, observer *Client, lock string, what string, cond func(*LockStatus) bool) *LockStatus {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ls := lockStatus(t, observer, lock)
		if cond(ls) {
			return ls
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of %s never showed %s; last: %s", lock, what, describe(ls))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// queuedWithTicket reports whether id waits in ls's queue with a Ticket.
func queuedWithTicket(ls *LockStatus, id wire.ClientID) bool {
	for _, p := range ls.Queue {
		if p.Client == id && p.Phase == wire.PhaseTicket {
			return true
		}
	}
	return false
}

// isMember reports whether id holds or waits for ls in any phase.
func isMember(ls *LockStatus, id wire.ClientID) bool {
	for _, p := range append(ls.Holders, ls.Queue...) {
		if p.Client == id {
			return true
		}
	}
	return false
}

// holderIs reports whether id is ls's holder.
func holderIs(ls *LockStatus, id wire.ClientID) bool {
	return ls.Holder != nil && ls.Holder.Client == id
}

func describe(ls *LockStatus) string {
	s := "holders=["
	for i, p := range ls.Holders {
		if i > 0 {
			s += " "
		}
		s += p.Client.String() + "/" + p.Mode.String()
	}
	s += "] queue=["
	for i, p := range ls.Queue {
		if i > 0 {
			s += " "
		}
		s += p.Client.String() + "/" + p.Phase.String()
	}
	return s + "]"
}
