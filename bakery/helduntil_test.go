package bakery_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/server/core"
)

// HeldUntil is the instant a holding's guarantee ends, read against the
// clock it is given, not against the last Tick: a caller that asks just
// after the lease lapsed hears "not held" although no Tick has noticed the
// lapse yet (docs/protocol.md change 68, rule 3: the agent's "valid" is
// never true once the holding could be lost).
func TestHeldUntilEndsAtTheLapseWithoutATick(t *testing.T) {
	n := newNetOf(t, 1, nil, nil, nil)
	n.lock(0)
	require.Equal(t, []int{0}, n.acquired())
	n.tick(time.Second) // heartbeats go and are acknowledged
	c := n.clients[0]
	until := c.HeldUntil(n.now, "L")
	require.True(t, until.After(n.now), "held now")
	require.Equal(t, c.LossAt(), until, "the lease's instant, with the grace")
	require.True(t, c.HeldUntil(n.now, "M").IsZero(), "a lock not held")

	n.drop = func(pkt) bool { return true } // no more acks: the instant stays
	require.Equal(t, until, c.HeldUntil(until.Add(-time.Nanosecond), "L"), "held up to the instant")
	require.True(t, c.HeldUntil(until, "L").IsZero(), "not held from the instant on, with no Tick since")
	require.True(t, c.HeldUntil(until.Add(time.Hour), "L").IsZero())
}

// With a max-hold, HeldUntil ends where the holder gives the lock up:
// entered + max-hold − margin, before the lease's instant.
func TestHeldUntilEndsAtTheMaxHold(t *testing.T) {
	const mh = 4 * time.Second
	n := newNetWith(t, 1, func(c *core.Config) { c.MaxHold = mh })
	n.lock(0)
	entered := n.now
	for range 30 { // keep the lease alive past the give-up instant
		n.tick(100 * time.Millisecond)
	}
	c := n.clients[0]
	giveUp := entered.Add(mh - 700*time.Millisecond) // the margin: TTL/10 (500 ms) and mh/20 (200 ms)
	until := c.HeldUntil(n.now, "L")
	require.False(t, until.After(giveUp), "held until %v, past the max-hold give-up %v", until, giveUp)
	require.True(t, c.HeldUntil(giveUp, "L").IsZero())
}
