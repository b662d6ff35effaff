package bakery_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// tick lets d pass in steps of 100 ms: servers and clients tick, and
// every message is delivered.
func (n *net) tick(d time.Duration) {
	for end := n.now.Add(d); n.now.Before(end); {
		n.now = n.now.Add(100 * time.Millisecond)
		for si, s := range n.servers {
			n.serverOut(si, s.Tick(n.now))
		}
		for ci, c := range n.clients {
			n.clientOut(ci, c.Tick(n.now))
		}
		n.run()
	}
}

// A holder gives its lock up at its max-hold, less the margin, before
// the servers would refuse its lease: it reports Lost with ErrMaxHold,
// the next client enters, and the holder's session lives on
// (docs/protocol.md change 24).
func TestHolderGivesUpAtItsMaxHold(t *testing.T) {
	const mh = 4 * time.Second
	n := newNetWith(t, 2, func(c *core.Config) { c.MaxHold = mh })
	require.Equal(t, mh, n.clients[0].MaxHold(), "learned from the servers' SessionAcks")
	n.lock(0)
	entered := n.now
	n.lock(1)
	require.Equal(t, []int{0}, n.acquired())

	// The margin: the lease margin (TTL/10 = 500 ms) and mh/20 (200 ms).
	n.tick(mh - 800*time.Millisecond)
	require.Equal(t, []int{0}, n.acquired(), "held until the margin")
	n.tick(300 * time.Millisecond)
	var lost *bakery.Event
	for i := range n.events {
		if n.events[i].Kind == bakery.Lost {
			lost = &n.events[i]
		}
	}
	require.NotNil(t, lost, "%v", n.events)
	require.True(t, errors.Is(lost.Err, bakery.ErrMaxHold), "%v", lost.Err)
	require.Less(t, n.now.Sub(entered), mh)
	require.Equal(t, []int{0, 1}, n.acquired(), "the next client entered")

	n.tick(10 * time.Second) // well past the servers' clocks and a TTL
	require.True(t, n.clients[0].LeaseHolds(n.now), "the holder left in time: its session was never refused")
}

// A request refused by a rate is sent again once the refusal's RetryAfter
// has passed, not counted as a refusal (change 25): a client faster than
// client_rate slows down instead of failing. Here each cycle's Held and
// Exit go past a burst of 2 and are refused, then retried.
func TestRateRefusalIsRetried(t *testing.T) {
	n := newNetWith(t, 1, func(c *core.Config) { c.ClientRate, c.ClientBurst = 1, 2 })
	for i := range 4 {
		e, err := n.clients[0].Lock(n.now, "L", false)
		require.NoError(t, err)
		n.clientOut(0, e)
		n.run()
		require.Len(t, n.acquired(), i+1, "cycle %d: %v", i, n.events)
		n.unlock(0)
		n.tick(5 * time.Second)
		released := 0
		for _, ev := range n.events {
			require.NotEqual(t, bakery.Failed, ev.Kind, "%v", ev)
			if ev.Kind == bakery.Released {
				released++
			}
		}
		require.Equal(t, i+1, released, "cycle %d: the Exit went through on its retry: %v", i, n.events)
	}
}

// A server that keeps refusing one request by a rate makes the client keep
// one retry of it, not one per refusal: a faulty server's errors grow
// nothing (change 25).
func TestRepeatedRateRefusalsKeepOneRetry(t *testing.T) {
	n := newNet(t, 1)
	c := n.clients[0]
	e, err := c.Lock(n.now, "L", false)
	require.NoError(t, err)
	var req uint64
	for _, s := range e.Send {
		if s.Msg.Submit != nil {
			req = s.Msg.Submit.Req
		}
	}
	require.NotZero(t, req)
	refusal := &wire.Message{Error: &wire.Error{Req: req, Code: wire.ErrCodeLimit, Limit: &wire.Limit{Name: "client_rate", Value: 1, RetryAfterMillis: 5000}}}
	for range 1000 {
		c.Step(n.now, 1, refusal)
	}
	require.Equal(t, 1, c.PendingRetries())
}

// A Lock whose holding the max-hold would end within its margin is refused
// at once, naming the bound and the TTL that fits; one that keeps half the
// max-hold is let in (docs/protocol.md change 24). With TTL 5 s the margin
// is 500 ms + max-hold/20: a max-hold of 1 s would leave 450 ms (refused),
// one of 1.2 s leaves 640 ms (let in).
func TestLockRefusedWhenTheMaxHoldIsMostlyMargin(t *testing.T) {
	short := newNetWith(t, 1, func(c *core.Config) { c.MaxHold = time.Second })
	_, err := short.clients[0].Lock(short.now, "L", false)
	require.ErrorIs(t, err, bakery.ErrRefused)
	require.ErrorContains(t, err, "at most 1s (its max-hold)")
	require.ErrorContains(t, err, "use a TTL of at most 4.5s")

	fits := newNetWith(t, 1, func(c *core.Config) { c.MaxHold = 1200 * time.Millisecond })
	fits.lock(0)
	require.Equal(t, []int{0}, fits.acquired())
}

// With a loss grace, a holder that gives up at its max-hold sends its Exit
// only the grace and ε·TTL later (or at ReleaseLost, with
// ExitLostOnRelease), so its work has stopped before the next client
// enters — still before the servers' cut (docs/protocol.md change 41).
func TestMaxHoldExitWaitsOutTheGrace(t *testing.T) {
	const mh, grace = 10 * time.Second, 500 * time.Millisecond
	for _, onRelease := range []bool{false, true} {
		n := newNetOf(t, 2, func(c *core.Config) { c.MaxHold = mh },
			func(c *bakery.ClientConfig) { c.Grace = grace; c.ExitLostOnRelease = onRelease }, nil)
		n.lock(0)
		entered := n.now
		n.lock(1)
		var lostAt time.Time
		for lostAt.IsZero() {
			n.tick(100 * time.Millisecond)
			for _, ev := range n.events {
				if ev.Kind == bakery.Lost {
					lostAt = n.now
				}
			}
		}
		const margin = 5 * time.Second / 10 // ε·TTL
		for n.now.Before(lostAt.Add(grace + margin - 100*time.Millisecond)) {
			require.Equal(t, []int{0}, n.acquired(), "onRelease=%t: %v after giving up", onRelease, n.now.Sub(lostAt))
			n.tick(100 * time.Millisecond)
		}
		if onRelease {
			n.tick(time.Second)
			require.Equal(t, []int{0}, n.acquired(), "the Exit waits for ReleaseLost")
			e, waited := n.clients[0].ReleaseLost("L")
			require.True(t, waited)
			n.clientOut(0, e)
			n.run()
		}
		n.tick(300 * time.Millisecond)
		require.Equal(t, []int{0, 1}, n.acquired(), "onRelease=%t: the next client entered", onRelease)
		if !onRelease {
			require.Less(t, n.now.Sub(entered), mh, "before the servers' cut")
		}
	}
}
