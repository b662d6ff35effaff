package bq

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdAsync runs lock in a goroutine and delivers its result.
func holdAsync(lock func() (*Holding, error)) <-chan lockResult {
	out := make(chan lockResult, 1)
	go func() {
		h, err := lock()
		out <- lockResult{h, err}
	}()
	return out
}

// waitPhase polls c's attempt on lock until its phase (bakery.Wait.Phase)
// is want, failing at once if the attempt entered instead ("held") or its
// Lock returned.
func waitPhase(t *testing.T, c *Client, lock string, ch <-chan lockResult, want, what string) bakery.Wait {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		c.mu.Lock()
		w := c.bk.Waiting(lock)
		c.mu.Unlock()
		if w.Phase == want {
			return w
		}
		pending(t, ch, what)
		if w.Phase == "held" {
			t.Fatalf("%s entered (phase held) while waiting for phase %s", what, want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached phase %s; last %+v", what, want, w)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// staysOut checks the blocking path of a waiter's attempt on lock (ch is
// its Lock's result) while holders hold it (every holder's client in
// holders): the waiter must have provably queued and heard the servers, and
// still be out.
//
//   - Its Ticket is in every server's status, and its attempt is in LISTEN:
//     its Listen went out, to every server, before anything sent after it.
//   - It then asks every server for the lock's status itself. A server
//     answers a client's messages in order on the connection's one stream
//     (transport), and the client steps what it receives in order: once
//     every server answered, each has reported what it had to report to
//     that Listen (or holds its report: docs/protocol.md change 27), and
//     the waiter has applied the LISTEN rule to all of it. A waiter whose
//     rule let it in beside the holders would be in phase held by now.
//   - The same again once each holder's lease was renewed after that (its
//     guarantee extended by q servers' acknowledgements of a later
//     heartbeat, some TTL/3 on): the holders are provably alive and in,
//     and the waiter is still out, a heartbeat period later and not
//     microseconds after it started.
//
// Each step waits on an event (a reply, a renewal), never a fixed sleep.
func staysOut(t *testing.T, waiter *Client, lock string, ch <-chan lockResult, what string, holders ...*Client) {
	t.Helper()
	inside := func(ls *LockStatus) bool {
		for _, p := range ls.Holders {
			if p.Client == waiter.ID() {
				return true
			}
		}
		return false
	}
	ls := waitStatus(t, waiter, lock, what+" queued with a ticket", func(ls *LockStatus) bool {
		return queuedWithTicket(ls, waiter.ID()) || inside(ls)
	})
	require.False(t, inside(ls), "%s entered beside the holders: %s", what, describe(ls))
	waitPhase(t, waiter, lock, ch, "listen", what)
	out := func(when string) {
		t.Helper()
		ls := lockStatus(t, waiter, lock) // a round trip to every server, after the Listen
		waiter.mu.Lock()
		w := waiter.bk.Waiting(lock)
		waiter.mu.Unlock()
		pending(t, ch, what)
		require.Equal(t, "listen", w.Phase, "%s %s: %s", what, when, describe(ls))
		if !w.Held {
			// Snapshots (an unheld Listen): every server reported, so the
			// rule was applied to q reports and found members ahead.
			require.GreaterOrEqual(t, w.Answered, w.Need, "%s %s heard every server", what, when)
			require.NotEmpty(t, w.Ahead, "%s %s: members ahead", what, when)
		}
		require.True(t, queuedWithTicket(ls, waiter.ID()), "%s %s still queued: %s", what, when, describe(ls))
		require.Len(t, ls.Holders, len(holders), "%s %s: the holders are still in: %s", what, when, describe(ls))
	}
	out("once every server answered after its Listen")
	for _, h := range holders {
		h.mu.Lock()
		before := h.bk.LeaseValidUntil()
		h.mu.Unlock()
		deadline := time.Now().Add(waitTimeout)
		for {
			h.mu.Lock()
			renewed := h.bk.LeaseValidUntil().After(before)
			h.mu.Unlock()
			if renewed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the lease of holder %s was not renewed", h.ID())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	out("after the holders' leases were renewed")
}

// docs/protocol.md change 60: three readers hold together while a writer
// waits; the writer then enters alone, a reader after it waits for it, and
// its token exceeds every token granted before it.
func TestReadersShareAndAWriterEntersAlone(t *testing.T) {
	tc := newCluster(t, 4)
	ctx := ctxFor(t, waitTimeout)
	var readers []*Holding
	var readerClients []*Client
	for range 3 {
		rc := tc.dial(Config{})
		h, err := rc.RWMutex("config").RLock(ctx)
		require.NoError(t, err)
		require.Equal(t, Mode{Mode: wire.ModeShared}, h.Mode())
		readers = append(readers, h)
		readerClients = append(readerClients, rc)
	}
	wc := tc.dial(Config{})
	w := holdAsync(func() (*Holding, error) { return wc.RWMutex("config").Lock(ctx) })
	_, err := tc.dial(Config{}).RWMutex("config").TryLock(ctx)
	require.ErrorIs(t, err, ErrBusy, "a writer's TryLock with readers in")
	staysOut(t, wc, "config", w, "the writer's Lock", readerClients...)
	// (The busy TryLock's Exit may reach some servers after the writer's
	// ticket: wait until the queue is the writer alone.)
	ls := waitStatus(t, wc, "config", "the writer alone queued behind three readers", func(ls *LockStatus) bool {
		return len(ls.Holders) == 3 && len(ls.Queue) == 1 && queuedWithTicket(ls, wc.ID())
	})
	// One model (issue 55): holders under Holders, each reading "holding";
	// the queue only the writer, waiting; Holder the first of Holders.
	for _, h := range ls.Holders {
		require.Equal(t, "holding", h.State())
		require.Equal(t, Mode{Mode: wire.ModeShared}, h.Mode)
	}
	require.Len(t, ls.Queue, 1, describe(ls))
	require.Equal(t, wc.ID(), ls.Queue[0].Client)
	require.Equal(t, "waiting", ls.Queue[0].State())
	require.Equal(t, ls.Holders[0], *ls.Holder)

	late := tc.dial(Config{})
	for i, h := range readers {
		require.NoError(t, h.Unlock(ctx))
		if i < len(readers)-1 {
			// q servers took the Exit before Unlock returned, but a
			// Status may also hear from one that has not yet: wait until
			// it shows the reader gone. The writer still waits for the
			// others.
			left := len(readers) - 1 - i
			ls := waitStatus(t, wc, "config", fmt.Sprintf("%d readers left", left), func(ls *LockStatus) bool { return len(ls.Holders) == left })
			pending(t, w, "the writer's Lock")
			require.True(t, queuedWithTicket(ls, wc.ID()), "the writer waits for every reader: %s", describe(ls))
		}
	}
	wr := await(t, w)
	require.NoError(t, wr.err)
	require.Equal(t, Mode{}, wr.h.Mode())
	for _, h := range readers {
		require.True(t, h.Token().Less(wr.h.Token()), "a writer's token exceeds every token granted before it")
	}
	_, err = late.RWMutex("config").TryRLock(ctx)
	require.ErrorIs(t, err, ErrBusy, "a reader's TryRLock with a writer in")
	r := holdAsync(func() (*Holding, error) { return late.RWMutex("config").RLock(ctx) })
	staysOut(t, late, "config", r, "a reader behind the writer", wc)
	require.NoError(t, wc.RWMutex("config").Unlock(ctx, wr.h))
	rr := await(t, r)
	require.NoError(t, rr.err)
	require.True(t, wr.h.Token().Less(rr.h.Token()))
	require.ErrorIs(t, late.RWMutex("config").Unlock(ctx, rr.h), ErrNotHeld, "a read holding is not a write holding")
	require.NoError(t, late.RWMutex("config").RUnlock(ctx, rr.h))
}

// Change 60: a semaphore of 2 lets two holders in and no third; a holder of
// another count is excluded as a writer would be.
func TestSemaphoreOfTwo(t *testing.T) {
	tc := newCluster(t, 4)
	ctx := ctxFor(t, waitTimeout)
	a, b, c, d := tc.dial(Config{}), tc.dial(Config{}), tc.dial(Config{}), tc.dial(Config{})
	ha, err := a.Semaphore("gpus", 2).Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, Mode{Mode: wire.ModePermits, Permits: 2}, ha.Mode())
	hb, err := b.Semaphore("gpus", 2).Acquire(ctx)
	require.NoError(t, err)
	_, err = d.Semaphore("gpus", 2).TryAcquire(ctx)
	require.ErrorIs(t, err, ErrBusy, "a third holder")
	_, err = d.Semaphore("gpus", 3).TryAcquire(ctx)
	require.ErrorIs(t, err, ErrBusy, "a holder of another count is excluded")
	third := holdAsync(func() (*Holding, error) { return c.Semaphore("gpus", 2).Acquire(ctx) })
	staysOut(t, c, "gpus", third, "a third Acquire", a, b)
	require.NoError(t, a.Semaphore("gpus", 2).Release(ctx, ha))
	hc := await(t, third)
	require.NoError(t, hc.err)
	require.NoError(t, hb.Unlock(ctx))
	require.NoError(t, hc.h.Unlock(ctx))

	for _, k := range []int{-1, 0, 1, wire.MaxPermits + 1} {
		_, err := a.Semaphore("gpus", k).Acquire(ctx)
		require.ErrorContains(t, err, "want 2 to 1024", "%d permits", k)
	}
}

// LockAll takes its locks in one global order: two clients that name the
// same locks in opposite orders never deadlock, and each holds all of them
// alone.
func TestLockAllNeverDeadlocks(t *testing.T) {
	tc := newCluster(t, 4)
	ctx := ctxFor(t, 4*waitTimeout)
	var wg sync.WaitGroup
	var mu sync.Mutex
	inside := 0
	for i, c := range []*Client{tc.dial(Config{}), tc.dial(Config{})} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			names := []string{"a", "b"}
			if i == 1 {
				names = []string{"b", "a"}
			}
			for range 3 {
				hs, err := c.LockAll(ctx, c.Mutex(names[0]), c.Mutex(names[1]))
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				inside++
				if inside != 1 {
					t.Errorf("%d clients hold both locks", inside)
				}
				mu.Unlock()
				require.Len(t, hs.List(), 2)
				require.Equal(t, "a", hs.List()[0].Name(), "taken by name")
				// Each lock's own fencing token, by name (issue 55).
				assert.True(t, hs.List()[1] == hs.Holding("b"), "Holding(\"b\") is b's holding")
				assert.True(t, hs.Holding("c") == nil, "no holding of c")
				mu.Lock()
				inside--
				mu.Unlock()
				assertNoError(t, hs.Unlock(ctx))
			}
		}()
	}
	wg.Wait()
	c := tc.dial(Config{})
	_, err := c.LockAll(ctx, c.Mutex("a"), c.RWMutex("a").Reader())
	require.ErrorContains(t, err, `"a" named twice`)

	// A lock that fails releases those taken before it.
	hs, err := c.LockAll(ctx, c.Mutex("a"), c.Semaphore("z", 1))
	require.Nil(t, hs)
	require.ErrorContains(t, err, "want 2 to 1024")
	other := tc.dial(Config{})
	h, err := other.Mutex("a").TryLock(ctx)
	require.NoError(t, err, "LockAll released a when z failed")
	require.NoError(t, h.Unlock(ctx))
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// Change 60 with change 19: a shared or permits Lock fails at once, naming
// the servers, when so many announced protocol 1.8 that fewer than q can
// take its statements; an exclusive Lock is not concerned.
func TestSharedHoldingsNeedProtocolOneNine(t *testing.T) {
	tc := newCluster(t, 4)
	c := tc.dial(Config{})
	ctx := ctxFor(t, waitTimeout)
	old := wire.Version{Major: wire.ProtocolMajor, Minor: 8}
	c.mu.Lock()
	c.versions[0], c.versions[1] = old, old
	c.mu.Unlock()
	_, err := c.RWMutex("v").RLock(ctx)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "needs protocol 1.9 at 3 of 4 servers, and s0 (1.8), s1 (1.8) speak an older one")
	_, err = c.Semaphore("v", 2).Acquire(ctx)
	require.ErrorIs(t, err, ErrRefused)
	h, err := c.Mutex("v").Lock(ctx)
	require.NoError(t, err, "an exclusive statement is encoded as in 1.8")
	require.NoError(t, h.Unlock(ctx))

	c.mu.Lock()
	c.versions[1] = wire.Current
	c.mu.Unlock()
	h, err = c.RWMutex("v").RLock(ctx)
	require.NoError(t, err, "one 1.8 server of four leaves q")
	require.NoError(t, h.Unlock(ctx))
}
