package bq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Lock, Token, Name and Unlock as a user sees them; an Unlock of a holding
// that is over says so; bad names are refused before anything is sent.
func TestLockUnlockRoundTrip(t *testing.T) {
	tc := newCluster(t, 4)
	c := tc.dial(Config{})
	ctx := ctxFor(t, waitTimeout)

	m := c.Mutex("orders")
	require.Equal(t, "orders", m.Name())
	h, err := m.Lock(ctx)
	require.NoError(t, err)
	require.Equal(t, "orders", h.Name())
	require.Equal(t, c.ID(), h.Token().Client, "the token names its holder")
	require.NotZero(t, h.Token().N)
	select {
	case <-h.Lost():
		t.Fatal("a fresh holding is lost")
	default:
	}
	ls := lockStatus(t, c, "orders")
	require.True(t, holderIs(ls, c.ID()), "status shows the holder: %s", describe(ls))
	require.Equal(t, h.Token().N, ls.Holder.Ticket)

	require.NoError(t, h.Unlock(ctx))
	require.ErrorIs(t, h.Unlock(ctx), ErrNotHeld, "a second Unlock")
	select {
	case <-h.Lost():
		t.Fatal("Unlock closed Lost")
	default:
	}
	ls = lockStatus(t, c, "orders")
	require.False(t, isMember(ls, c.ID()), "Unlock left %s", describe(ls))

	for _, bad := range []string{"", string(make([]byte, 257)), "a\nb", "\xff"} {
		_, err := c.Mutex(bad).Lock(ctx)
		require.Error(t, err, "%q", bad)
		_, err = c.Mutex(bad).TryLock(ctx)
		require.Error(t, err, "%q", bad)
		if bad != "" { // "" asks about every lock
			_, err = c.Status(ctx, bad)
			require.Error(t, err, "%q", bad)
		}
		_, err = c.Release(ctx, bad)
		require.Error(t, err, "%q", bad)
	}
}

// docs/protocol.md §7: fencing tokens grow strictly from each holder to the next,
// across clients and across idle periods (hw), and each names its holder.
func TestTokensGrowAcrossHolders(t *testing.T) {
	tc := newCluster(t, 4)
	clients := []*Client{tc.dial(Config{}), tc.dial(Config{})}
	ctx := ctxFor(t, waitTimeout)
	var prev Token
	for i := range 6 {
		c := clients[i%2]
		h, err := c.Mutex("fenced").Lock(ctx)
		require.NoError(t, err)
		tok := h.Token()
		require.Equal(t, c.ID(), tok.Client)
		if i > 0 {
			require.True(t, prev.Less(tok), "holding %d: token %s is not above %s", i, tok, prev)
			require.Greater(t, tok.N, prev.N, "holding %d: N must grow, not just the client id", i)
		}
		prev = tok
		require.NoError(t, h.Unlock(ctx))
	}
}

// Mutual exclusion inside one process: several goroutines of several clients
// contend on one name; never two in the critical section, every Lock
// returns, and tokens grow in the order the critical sections ran.
func TestMutualExclusionUnderContention(t *testing.T) {
	const clients, perClient, rounds = 3, 2, 3
	tc := newCluster(t, 4)
	ctx := ctxFor(t, 2*waitTimeout)

	var inCS, maxInCS atomic.Int32
	var mu sync.Mutex // orders the record for the race detector, which cannot see the lock service
	var tokens []Token
	var wg sync.WaitGroup
	errs := make(chan error, clients*perClient)
	for range clients {
		c := tc.dial(Config{})
		for range perClient {
			wg.Go(func() {
				for range rounds {
					h, err := c.Mutex("contended").Lock(ctx)
					if err != nil {
						errs <- err
						return
					}
					n := inCS.Add(1)
					for {
						m := maxInCS.Load()
						if n <= m || maxInCS.CompareAndSwap(m, n) {
							break
						}
					}
					mu.Lock()
					tokens = append(tokens, h.Token())
					mu.Unlock()
					time.Sleep(time.Millisecond) // widen the window for an overlap to show
					inCS.Add(-1)
					if err := h.Unlock(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, maxInCS.Load(), "two holders were in the critical section at once")
	require.Len(t, tokens, clients*perClient*rounds)
	for i := 1; i < len(tokens); i++ {
		require.True(t, tokens[i-1].Less(tokens[i]), "critical section %d: token %s after %s", i, tokens[i], tokens[i-1])
	}
}

// TryLock gives up with ErrBusy when someone is ahead and leaves no attempt
// behind: the name is free for this client again, and the servers show
// nothing of it.
func TestTryLockBusy(t *testing.T) {
	tc := newCluster(t, 4)
	holder, other := tc.dial(Config{}), tc.dial(Config{})
	ctx := ctxFor(t, waitTimeout)

	h, err := holder.Mutex("try").TryLock(ctx)
	require.NoError(t, err, "TryLock of a free lock takes it")

	_, err = other.Mutex("try").TryLock(ctx)
	require.ErrorIs(t, err, ErrBusy)
	// Asked of the same client after TryLock returned, so every server's
	// answer comes after it applied the Exit (one ordered stream per server).
	ls := lockStatus(t, other, "try")
	require.False(t, isMember(ls, other.ID()), "TryLock left an attempt behind: %s", describe(ls))
	require.True(t, holderIs(ls, holder.ID()), describe(ls))
	require.Empty(t, ls.Queue, describe(ls))
	other.mu.Lock()
	require.Zero(t, other.bk.Attempt("try"), "the client still has an attempt")
	other.mu.Unlock()

	// One client holds a name at most once: the holder's own TryLock finds
	// its first holding ahead and does not wait for it.
	_, err = holder.Mutex("try").TryLock(ctx)
	require.ErrorIs(t, err, ErrBusy)

	require.NoError(t, h.Unlock(ctx))
	h2, err := other.Mutex("try").Lock(ctx)
	require.NoError(t, err, "after ErrBusy and the holder's Unlock, a plain Lock succeeds")
	require.True(t, h.Token().Less(h2.Token()))
	require.NoError(t, h2.Unlock(ctx))
}

// Cancelling Lock's context while it waits returns at once with the context's
// error (ErrTimeout for a deadline) and leaves nothing behind: the holder
// then hands over to a third client, not to the one that gave up.
func TestLockCancelWhileWaiting(t *testing.T) {
	tc := newCluster(t, 4)
	holder, quitter, third := tc.dial(Config{}), tc.dial(Config{}), tc.dial(Config{})
	ctx := ctxFor(t, waitTimeout)
	h, err := holder.Mutex("cancel").Lock(ctx)
	require.NoError(t, err)

	t.Run("cancel", func(t *testing.T) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		r := lockAsync(wctx, quitter, "cancel")
		waitStatus(t, holder, "cancel", "the waiter's ticket", func(ls *LockStatus) bool { return queuedWithTicket(ls, quitter.ID()) })
		start := time.Now()
		cancel()
		got := await(t, r)
		took := time.Since(start)
		require.ErrorIs(t, got.err, context.Canceled)
		require.NotErrorIs(t, got.err, ErrTimeout)
		require.Nil(t, got.h)
		// At once, not when the holder leaves (it holds until the end of
		// the test; await would fail first) nor after its Exit is applied
		// (Lock sends it and returns). raceLate: -race on 2 cores.
		require.Less(t, took, raceLate, "Lock should return at once when its context is cancelled")
		t.Logf("Lock returned %v after cancel", took)
		ls := lockStatus(t, quitter, "cancel")
		require.False(t, isMember(ls, quitter.ID()), "the cancelled attempt is still there: %s", describe(ls))
		require.True(t, holderIs(ls, holder.ID()), describe(ls))
	})

	t.Run("deadline", func(t *testing.T) {
		const wait = 300 * time.Millisecond
		dctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		start := time.Now()
		_, err := quitter.Mutex("cancel").Lock(dctx)
		took := time.Since(start)
		require.ErrorIs(t, err, ErrTimeout)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.GreaterOrEqual(t, took, wait)
		require.Less(t, took, wait+raceLate, "at its deadline (raceLate: -race on 2 cores), not when the holder leaves")
		ls := lockStatus(t, quitter, "cancel")
		require.False(t, isMember(ls, quitter.ID()), "the timed-out attempt is still there: %s", describe(ls))
	})

	r := lockAsync(ctx, third, "cancel")
	waitStatus(t, holder, "cancel", "the third client's ticket", func(ls *LockStatus) bool { return queuedWithTicket(ls, third.ID()) })
	require.NoError(t, h.Unlock(ctx))
	got := await(t, r)
	require.NoError(t, got.err)
	require.Equal(t, third.ID(), got.h.Token().Client)
	require.NoError(t, got.h.Unlock(ctx))

	// The client that gave up can lock the name again.
	h, err = quitter.Mutex("cancel").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))
}

// One client holds a name at most once: a second goroutine of the same client
// that locks it waits for the first Unlock, then gets its own holding.
func TestSameClientTwoGoroutines(t *testing.T) {
	tc := newCluster(t, 4)
	c := tc.dial(Config{})
	ctx := ctxFor(t, waitTimeout)

	h1, err := c.Mutex("twice").Lock(ctx)
	require.NoError(t, err)
	var unlocked atomic.Bool
	type result struct {
		lockResult
		afterUnlock bool
	}
	done := make(chan result, 1)
	go func() {
		h, err := c.Mutex("twice").Lock(ctx)
		done <- result{lockResult{h, err}, unlocked.Load()}
	}()
	// Whatever the second goroutine does meanwhile, the servers see one
	// attempt of this client: the holding.
	ls := lockStatus(t, c, "twice")
	require.True(t, holderIs(ls, c.ID()), describe(ls))
	require.Empty(t, ls.Queue, describe(ls))

	unlocked.Store(true) // before Unlock: the second Lock may only return after this
	require.NoError(t, h1.Unlock(ctx))
	var got result
	select {
	case got = <-done:
	case <-time.After(waitTimeout):
		t.Fatal("the second Lock did not return after Unlock")
	}
	require.NoError(t, got.err)
	require.True(t, got.afterUnlock, "the second Lock returned while the first holding was held")
	require.True(t, h1.Token().Less(got.h.Token()))
	require.ErrorIs(t, h1.Unlock(ctx), ErrNotHeld, "the first holding is over")
	require.NoError(t, got.h.Unlock(ctx))
}

// Unlock whose context ends before the Exit completes returns the context's
// error; the Exit still completes, and the name is free again afterwards.
func TestUnlockContextEnded(t *testing.T) {
	tc := newCluster(t, 4)
	c, other := tc.dial(Config{}), tc.dial(Config{})
	ctx := ctxFor(t, waitTimeout)
	h, err := c.Mutex("u").Lock(ctx)
	require.NoError(t, err)
	done, cancel := context.WithCancel(ctx)
	cancel()
	err = h.Unlock(done)
	if err != nil { // the Exit may even have completed first
		require.ErrorIs(t, err, context.Canceled)
	}
	h2, err := other.Mutex("u").Lock(ctx)
	require.NoError(t, err, "the Exit went out anyway")
	require.NoError(t, h2.Unlock(ctx))
	h3, err := c.Mutex("u").Lock(ctx)
	require.NoError(t, err, "the name is free again in the first client")
	require.NoError(t, h3.Unlock(ctx))
}

// Close abandons a waiting attempt (which returns ErrClosed) and releases a
// holding at once, so other clients proceed without waiting for the lease.
func TestCloseAbandonsAndReleases(t *testing.T) {
	tc := newCluster(t, 4)
	holder, third := tc.dial(Config{}), tc.dial(Config{})
	// A long TTL: if Close did not release, the servers would keep the
	// holding far longer than this test waits.
	closing := tc.dial(Config{TTL: time.Minute})
	ctx := ctxFor(t, waitTimeout)

	hw, err := holder.Mutex("wait").Lock(ctx)
	require.NoError(t, err)
	hh, err := closing.Mutex("held").Lock(ctx)
	require.NoError(t, err)
	waiting := lockAsync(ctx, closing, "wait")
	waitStatus(t, holder, "wait", "the waiter's ticket", func(ls *LockStatus) bool { return queuedWithTicket(ls, closing.ID()) })
	second := lockAsync(ctx, closing, "held") // a second goroutine on a name this client holds

	require.NoError(t, closing.Close())
	got := await(t, waiting)
	require.ErrorIs(t, got.err, ErrClosed)
	got = await(t, second)
	require.ErrorIs(t, got.err, ErrClosed)

	// Close waited for q servers; the others learn of it from them.
	for _, name := range []string{"wait", "held"} {
		waitStatus(t, holder, name, "no trace of the closed client", func(ls *LockStatus) bool { return !isMember(ls, closing.ID()) })
	}
	fast := ctxFor(t, 5*time.Second)
	h, err := third.Mutex("held").Lock(fast)
	require.NoError(t, err, "Close released the holding")
	require.NoError(t, h.Unlock(ctx))
	r := lockAsync(ctx, third, "wait")
	waitStatus(t, holder, "wait", "the third client's ticket", func(ls *LockStatus) bool { return queuedWithTicket(ls, third.ID()) })
	require.NoError(t, hw.Unlock(ctx))
	got = await(t, r)
	require.NoError(t, got.err)
	require.NoError(t, got.h.Unlock(ctx))

	// Everything on a closed client says so.
	require.ErrorIs(t, hh.Unlock(ctx), ErrClosed)
	_, err = closing.Mutex("held").Lock(ctx)
	require.ErrorIs(t, err, ErrClosed)
	_, err = closing.Mutex("other").TryLock(ctx)
	require.ErrorIs(t, err, ErrClosed)
	_, err = closing.Status(ctx, "held")
	require.ErrorIs(t, err, ErrClosed)
	_, err = closing.Release(ctx, "held")
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, closing.Close(), "a second Close")
	require.NoError(t, closing.Detach(), "Detach after Close")
}

// One Client used by many goroutines at once, each on its own lock names,
// with Status calls alongside: run under -race.
func TestConcurrentUseOfOneClient(t *testing.T) {
	const goroutines, rounds = 12, 3
	tc := newCluster(t, 4)
	c := tc.dial(Config{})
	ctx := ctxFor(t, 2*waitTimeout)

	var wg sync.WaitGroup
	errs := make(chan error, goroutines+1)
	for g := range goroutines {
		wg.Go(func() {
			name := fmt.Sprintf("lock-%d", g)
			var prev Token
			for i := range rounds {
				var h *Holding
				var err error
				if i%2 == 0 {
					h, err = c.Mutex(name).Lock(ctx)
				} else {
					h, err = c.Mutex(name).TryLock(ctx) // nobody else wants it
				}
				if err != nil {
					errs <- fmt.Errorf("%s round %d: %w", name, i, err)
					return
				}
				if i > 0 && !prev.Less(h.Token()) {
					errs <- fmt.Errorf("%s round %d: token %s after %s", name, i, h.Token(), prev)
				}
				prev = h.Token()
				if err := h.Unlock(ctx); err != nil {
					errs <- fmt.Errorf("%s round %d: unlock: %w", name, i, err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 3 {
			st, err := c.Status(ctx, "")
			if err != nil {
				errs <- err
				return
			}
			if st.Reachable != st.N {
				errs <- errors.New("a server did not answer Status")
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st, err := c.Status(ctx, "")
	require.NoError(t, err)
	require.Empty(t, st.Locks, "every lock was released")
}

// An abandoned attempt whose Exit cannot reach a quorum keeps its name busy
// until it ends: a next Lock of the name waits for it within its own context
// (ErrTimeout here), never fails on "an attempt already in progress", and
// succeeds once the Exit goes through.
func TestLockAfterAbandonWithStuckExit(t *testing.T) {
	tc := newCluster(t, 4)
	holder, quitter := tc.dial(Config{}), tc.dial(Config{})
	ctx := ctxFor(t, waitTimeout)
	h, err := holder.Mutex("stuck").Lock(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := lockAsync(wctx, quitter, "stuck")
	waitStatus(t, holder, "stuck", "the waiter's ticket", func(ls *LockStatus) bool { return queuedWithTicket(ls, quitter.ID()) })

	tc.stop(2)
	tc.stop(3) // no quorum: the Exit of the abandoned attempt cannot complete
	cancel()
	require.ErrorIs(t, await(t, r).err, context.Canceled)

	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	_, err = quitter.Mutex("stuck").Lock(short)
	require.ErrorIs(t, err, ErrTimeout, "the next Lock waits for the abandoned attempt")

	tc.start(2)
	tc.start(3)
	require.NoError(t, h.Unlock(ctx))
	h2, err := quitter.Mutex("stuck").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, h2.Unlock(ctx))
}

// A Lock whose deadline passes returns when it passes — its Exit goes out
// behind it — with one line that says what it waited for: the holder and
// its token. It is a timeout, not an outage.
func TestLockTimeoutSaysWhatItWaitedFor(t *testing.T) {
	tc := newCluster(t, 4)
	holder, waiter := tc.dial(Config{}), tc.dial(Config{})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	h, err := holder.Mutex("deploy").Lock(ctx)
	require.NoError(t, err)

	const timeout = 400 * time.Millisecond
	wctx, wcancel := context.WithTimeout(context.Background(), timeout)
	defer wcancel()
	start := time.Now()
	_, err = waiter.Mutex("deploy").Lock(wctx)
	took := time.Since(start)
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, ErrUnavailable)
	require.NotContains(t, err.Error(), "\n")
	require.Contains(t, err.Error(), `waiting for "deploy": held by `+holder.ID().Hex()[:16]+" (token "+h.Token().String()+")")
	// Not later: a Lock that waited on would wait for the holder, which
	// holds until after this check. raceLate: -race on 2 cores.
	require.Less(t, took, timeout+raceLate, "Lock returns when its deadline passes")

	require.NoError(t, h.Unlock(ctx))
	h2, err := waiter.Mutex("deploy").Lock(ctx)
	require.NoError(t, err, "the abandoned attempt is gone: the next Lock takes the lock")
	require.NoError(t, h2.Unlock(ctx))
}

// With two of four servers down, a Lock cannot get a quorum's answers: its
// timeout says so and is an outage (ErrUnavailable), not a busy lock.
func TestLockTimeoutWithoutQuorumIsUnavailable(t *testing.T) {
	tc := newCluster(t, 4)
	c := tc.dial(Config{})
	tc.stop(2)
	tc.stop(3)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := c.Mutex("deploy").Lock(ctx)
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, err, ErrUnavailable)
	require.NotContains(t, err.Error(), "\n")
	require.Contains(t, err.Error(), "2 of 4 servers answered its GET-TICKET, need 3")
}

// Shutdown keeps to its context even when the servers cannot acknowledge
// the Exits it sends: a command that must end now ends now.
func TestShutdownKeepsToItsContext(t *testing.T) {
	tc := newCluster(t, 4)
	c := tc.dial(Config{})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := c.Mutex("deploy").Lock(ctx)
	require.NoError(t, err)
	tc.stop(1)
	tc.stop(2)
	const budget = 300 * time.Millisecond
	sctx, scancel := context.WithTimeout(context.Background(), budget)
	defer scancel()
	done := make(chan error, 1)
	go func() { done <- c.Shutdown(sctx) }()
	select {
	case err = <-done:
	case <-time.After(waitTimeout):
		t.Fatal("Shutdown waits for the acknowledgements of servers that are down")
	}
	require.NoError(t, err)
	// The broken ways take at least a second more than the budget: the
	// Exits' acknowledgements never come (two servers are down: the
	// select above), and closing the session has a bound of its own of
	// 1 s, which must not outlast the caller's context. So the bound is a
	// second past the budget, as much as -race on 2 cores can be given
	// while telling them apart (see raceLate).
	deadline, _ := sctx.Deadline()
	require.Less(t, time.Since(deadline), time.Second, "Shutdown returns when its context ends")
}
