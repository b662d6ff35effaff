package core

import (
	"testing"
	"time"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// docs/protocol.md §5, §9: a server restarted while a client holds a session
// runs that session's lease with the client's own TTL, persisted at
// SessionOpen, never with its default; and it votes no earlier than a whole
// TTL after the restart, even when it never hears from the client again
// (a client's guarantee may rest on acks this server sent just before it
// went down). The default here (10 s) is far below the client's TTL (60 s).
func TestRestartKeepsTheClientsTTL(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	const ttl = time.Minute
	c.fromClient(2, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 7, TTLMillis: uint32(ttl / time.Millisecond)}})
	acks := c.replies(cl.id)
	require.Len(t, acks, 1)
	require.True(t, acks[0].SessionAck.LeaseOK)
	last := c.now // the last time server 2 heard from the client

	votesAt := func(s int, now time.Time) int {
		before := c.cores[s].Stats.VotesCast
		c.effects(s, c.cores[s].Tick(now))
		return int(c.cores[s].Stats.VotesCast - before)
	}

	c.restart(2)
	restarted := c.now.Add(time.Second)
	require.Zero(t, votesAt(2, restarted), "the first tick after the restart starts the lease")
	require.Less(t, c.cores[2].cfg.DefaultTTL, ttl)
	require.Zero(t, votesAt(2, last.Add(2*c.cores[2].cfg.DefaultTTL)), "no vote after the server's default TTL")
	require.Zero(t, votesAt(2, restarted.Add(ttl-time.Millisecond)), "no vote within the client's TTL of the restart")

	// A heartbeat that reaches the restarted server renews with the client's TTL.
	hb := restarted.Add(ttl / 2)
	c.now = hb
	c.fromClient(2, cl.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 7, Seq: 1}})
	require.True(t, c.replies(cl.id)[0].SessionAck.LeaseOK)
	require.Zero(t, votesAt(2, hb.Add(ttl-10*time.Millisecond)))
	require.Equal(t, 1, votesAt(2, hb.Add(ttl+10*time.Millisecond)), "silent for a whole TTL: now it votes")
}

// A certificate on a session drops its persisted TTL: what is kept for a
// client stays bounded.
func TestResetForgetsTheTTL(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	for s := range 4 {
		c.fromClient(s, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 3, TTLMillis: 1000}})
	}
	require.Len(t, c.disks[0][bucketTTL], 1)
	c.now = c.now.Add(2 * time.Second)
	for s := range 4 {
		c.effects(s, c.cores[s].Tick(c.now))
	}
	c.flush()
	require.Equal(t, uint64(3), c.cores[0].ResetUpTo(cl.id))
	require.Empty(t, c.disks[0][bucketTTL])
}
