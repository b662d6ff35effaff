package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq"
)

// fakeGrant is a holding whose guarantee and loss the test sets.
type fakeGrant struct {
	mu       sync.Mutex
	until    time.Time
	err      error
	lost     chan struct{}
	released chan time.Time
}

func newFakeGrant(until time.Time) *fakeGrant {
	return &fakeGrant{until: until, lost: make(chan struct{}), released: make(chan time.Time, 1)}
}

func (g *fakeGrant) Token() bq.Token       { return bq.Token{N: 7} }
func (g *fakeGrant) Lost() <-chan struct{} { return g.lost }
func (g *fakeGrant) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}
func (g *fakeGrant) ValidUntil() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return time.Time{}
	}
	return g.until
}
func (g *fakeGrant) Release(context.Context) error { g.released <- time.Now(); return nil }
func (g *fakeGrant) lose(err error) {
	g.mu.Lock()
	g.err = err
	g.mu.Unlock()
	close(g.lost)
}

func fakeHold(g grant, expires time.Time) *hold {
	return &hold{id: newLockID(), name: "L", g: g, started: time.Now(), expires: expires, state: stateHeld,
		release: make(chan struct{}), ended: make(chan struct{}), gone: make(chan struct{})}
}

// valid comes only from the grant's own instant and the hold's ttl: a
// holding whose instant is gone (zero) is not valid although nothing said
// lost yet, one whose ttl passed is not valid although its lease holds, and
// valid_until is the sooner of the two (change 68, rule 3).
func TestValidIsTheGuaranteesInstant(t *testing.T) {
	now := time.Now()
	g := newFakeGrant(now.Add(5 * time.Second))
	h := fakeHold(g, time.Time{})
	v := h.view(now)
	require.True(t, v.Valid)
	require.Equal(t, g.until.UTC(), *v.ValidUntil)

	g.mu.Lock()
	g.until = time.Time{} // the lease instant passed; no loss said yet
	g.mu.Unlock()
	v = h.view(now)
	require.Equal(t, stateHeld, v.State)
	require.False(t, v.Valid, "valid with no guarantee")
	require.Nil(t, v.ValidUntil)

	g2 := newFakeGrant(now.Add(5 * time.Second))
	h2 := fakeHold(g2, now.Add(time.Second))
	v = h2.view(now)
	require.True(t, v.Valid)
	require.Equal(t, now.Add(time.Second).UTC(), *v.ValidUntil, "the ttl comes first")
	v = h2.view(now.Add(time.Second))
	require.False(t, v.Valid, "valid past the hold's ttl")
}

// A loss shows at once, with its reason, before the agent noted it.
func TestALossShowsAtOnceWithItsReason(t *testing.T) {
	for _, c := range []struct {
		err    error
		reason string
	}{
		{bq.ErrLockLost, reasonLeaseLost},
		{fmt.Errorf("%w: %w", bq.ErrLockLost, bq.ErrMaxHold), reasonMaxHold},
		{fmt.Errorf("%w: revoked", bq.ErrNotPermitted), reasonRevoked},
	} {
		g := newFakeGrant(time.Now().Add(time.Minute))
		h := fakeHold(g, time.Time{})
		g.lose(c.err)
		v := h.view(time.Now())
		require.Equal(t, stateLost, v.State)
		require.Equal(t, c.reason, v.Reason, "%v", c.err)
		require.False(t, v.Valid)
	}
}

func testAgent(after time.Duration) *Agent {
	return &Agent{cfg: Config{ReleaseLostAfter: after}, holds: newHoldTable(10, time.Minute),
		stopping: make(chan struct{}), log: slog.New(slog.DiscardHandler)}
}

// A lost hold is released at the servers only when its caller releases it
// (its work has stopped) or ReleaseLostAfter later; a hold its caller
// releases goes at once (change 68, rule 4).
func TestALostHoldIsReleasedAfterItsCallerStopsOrTheGrace(t *testing.T) {
	const after = 300 * time.Millisecond
	a := testAgent(after)
	// Not released by the caller: the grace.
	g := newFakeGrant(time.Now().Add(time.Minute))
	h := fakeHold(g, time.Time{})
	a.holds.reserve()
	a.holds.add(h)
	go a.run(h)
	lost := time.Now()
	g.lose(bq.ErrLockLost)
	<-h.ended
	released := <-g.released
	require.GreaterOrEqual(t, released.Sub(lost), after, "released before the caller's work could stop")

	// Released by the caller after the loss: at once.
	g = newFakeGrant(time.Now().Add(time.Minute))
	h = fakeHold(g, time.Time{})
	a.holds.reserve()
	a.holds.add(h)
	go a.run(h)
	g.lose(bq.ErrLockLost)
	<-h.ended
	asked := time.Now()
	h.askRelease()
	released = <-g.released
	require.Less(t, released.Sub(asked), after)

	// A ttl ends the hold (expired), released the grace later.
	g = newFakeGrant(time.Now().Add(time.Minute))
	h = fakeHold(g, time.Now().Add(50*time.Millisecond))
	a.holds.reserve()
	a.holds.add(h)
	go a.run(h)
	<-h.ended
	ended := time.Now()
	require.Equal(t, reasonExpired, h.view(ended).Reason)
	released = <-g.released
	require.GreaterOrEqual(t, released.Sub(ended), after-10*time.Millisecond)
	<-h.gone
	require.Zero(t, a.holds.counts(), "every hold's room is free again")
}

// The table bounds live holds and remembers ended ones for a while, at
// most max of them.
func TestHoldTableBounds(t *testing.T) {
	tb := newHoldTable(2, time.Minute)
	now := time.Now()
	require.Nil(t, tb.reserve())
	require.Nil(t, tb.reserve())
	require.NotNil(t, tb.reserve(), "a third live hold")
	var hs []*hold
	for range 2 {
		h := fakeHold(newFakeGrant(now), time.Time{})
		tb.add(h)
		hs = append(hs, h)
	}
	for _, h := range hs {
		h.finish(stateReleased, "", "", now)
		tb.noteEnded(h, now)
	}
	require.NotNil(t, tb.get(hs[0].id, now), "an ended hold is remembered")
	for range 3 {
		require.Nil(t, tb.reserve())
		h := fakeHold(newFakeGrant(now), time.Time{})
		tb.add(h)
		h.finish(stateReleased, "", "", now)
		tb.noteEnded(h, now)
	}
	require.LessOrEqual(t, len(tb.byID), 2, "at most max ended holds")
	require.Nil(t, tb.get(hs[0].id, now), "the oldest forgotten first")
	require.Empty(t, func() []*hold { tb.forget(now.Add(time.Hour)); return tb.ended }(), "forgotten after retain")
}
