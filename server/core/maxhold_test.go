package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// newMaxHoldCluster is a 4-server cluster whose default max-hold is d.
func newMaxHoldCluster(t *testing.T, d time.Duration) *cluster {
	c := newCluster(t, 4, 1)
	c.maxHold = d
	for i := range c.cores {
		c.cores[i] = c.newCore(i, 4, 1)
	}
	return c
}

// enterTicket runs GET-TICKET and SET-TICKET of cl at every server with
// ticket n, and returns the Ticket.
func (c *cluster) enterTicket(cl *client, lock string, sess, att, n uint64) wire.SignedStatement {
	j := c.doorway(cl, lock, sess, att)
	tk := cl.stmt(lock, sess, att, wire.PhaseTicket, n, j)
	for s := range c.cores {
		c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	}
	c.replies(cl.id)
	return tk
}

// submitAll sends cl's statement to every server.
func (c *cluster) submitAll(cl *client, st wire.SignedStatement) {
	for s := range c.cores {
		c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: st}})
	}
	c.replies(cl.id)
}

// leaseOK sends a heartbeat of cl's session to every server and returns
// how many answered "lease ok".
func (c *cluster) leaseOK(cl *client, sess uint64) int {
	for s := range c.cores {
		c.fromClient(s, cl.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: sess, Seq: 1}})
	}
	ok := 0
	for _, m := range c.replies(cl.id) {
		if m.SessionAck != nil && m.SessionAck.LeaseOK {
			ok++
		}
	}
	return ok
}

// runFor ticks every core each 250 ms for d (a little more: it stops at
// the first tick past d) while clients (in session 1)
// heartbeat as often, and returns the least number of "lease ok" answers
// the first of them got.
func (c *cluster) runFor(d time.Duration, clients ...*client) int {
	least := len(c.cores)
	for end := c.now.Add(d); c.now.Before(end); {
		c.tick(250 * time.Millisecond)
		c.flush()
		least = min(least, c.leaseOK(clients[0], 1))
		for _, cl := range clients[1:] {
			c.leaseOK(cl, 1)
		}
	}
	return least
}

// A holder past its max-hold loses the lock through the ordinary
// certificate: every server refuses its lease from the max-hold on, and
// votes only when the lease runs out (docs/protocol.md change 24).
func TestMaxHoldEndsHoldingByCertificate(t *testing.T) {
	c := newMaxHoldCluster(t, 3*time.Second)
	cl := c.newClient()
	tk := c.enterTicket(cl, "L", 1, 1, 1)
	c.submitAll(cl, cl.stmt("L", 1, 1, wire.PhaseHeld, 1, nil))
	_ = tk
	require.Equal(t, 4, c.runFor(2500*time.Millisecond, cl), "renewed while under its max-hold")
	require.Equal(t, 0, c.runFor(time.Second, cl), "refused past its max-hold")
	for s, k := range c.cores {
		require.True(t, isMember(k, "L", cl.id), "server %d: no vote while its lease lives", s)
	}
	c.runFor(5*time.Second, cl) // the lease (5 s) runs out
	for s, k := range c.cores {
		require.False(t, isMember(k, "L", cl.id), "server %d: reset by certificate", s)
		require.NotNil(t, k.mute.Certificate(cl.id), "server %d", s)
	}
}

// A client that enters but never says Held meets the second start: its
// clock starts HeldDeadline after its Ticket was first the lock's least —
// not while a lower ticket is ahead of it, and an Exit stops a clock.
func TestMaxHoldWithoutHeldStartsAtTheLeastTicket(t *testing.T) {
	c := newMaxHoldCluster(t, 3*time.Second)
	a, b := c.newClient(), c.newClient()
	c.enterTicket(a, "L", 1, 1, 1)
	c.enterTicket(b, "L", 1, 1, 2)
	deadline := c.cores[0].cfg.DoorwayDeadline

	// a is least for 8 s and leaves before its HeldDeadline: no clock ran out.
	require.Equal(t, 4, c.runFor(8*time.Second, a, b))
	c.submitAll(a, a.stmt("L", 1, 1, wire.PhaseExit, 0, nil))
	require.Equal(t, 4, c.leaseOK(a, 1), "a left in time")

	// b waited behind a: its clock starts only HeldDeadline after a left.
	require.Equal(t, 4, c.runFor(deadline+2500*time.Millisecond, b), "b is under HeldDeadline + max-hold since it became least")
	require.Equal(t, 0, c.runFor(time.Second, b), "b, never Held, is refused past it")
}

// A certificate's own max-hold wins over the default, and every server
// tells the client the max-hold it applies in its SessionAck.
func TestMaxHoldOfTheCertificate(t *testing.T) {
	c := newMaxHoldCluster(t, time.Hour)
	cl := c.newClient()
	c.connect(cl, &wire.AdmissionBody{Name: "short", Client: cl.id, MaxHoldMillis: 2000})
	for s := range c.cores {
		c.fromClient(s, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	}
	for _, m := range c.replies(cl.id) {
		require.Equal(t, uint64(2000), m.SessionAck.MaxHoldMillis)
	}
	c.enterTicket(cl, "L", 1, 1, 1)
	c.submitAll(cl, cl.stmt("L", 1, 1, wire.PhaseHeld, 1, nil))
	require.Equal(t, 4, c.runFor(1500*time.Millisecond, cl))
	require.Equal(t, 0, c.runFor(time.Second, cl))

	other := c.newClient()
	c.fromClient(0, other.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	require.Equal(t, uint64(time.Hour/time.Millisecond), c.replies(other.id)[0].SessionAck.MaxHoldMillis)
}

// With no max-hold, a holding has no deadline (§5).
func TestNoMaxHoldNoDeadline(t *testing.T) {
	c := newMaxHoldCluster(t, 0)
	cl := c.newClient()
	c.enterTicket(cl, "L", 1, 1, 1)
	require.Equal(t, 4, c.runFor(30*time.Second, cl))
}

// An Exit stops the hold clock: a client that left in time keeps its
// session (and any other lock it holds in it).
func TestMaxHoldExitStopsTheClock(t *testing.T) {
	c := newMaxHoldCluster(t, 3*time.Second)
	cl := c.newClient()
	c.enterTicket(cl, "L", 1, 1, 1)
	c.submitAll(cl, cl.stmt("L", 1, 1, wire.PhaseHeld, 1, nil))
	require.Equal(t, 4, c.runFor(2*time.Second, cl))
	c.submitAll(cl, cl.stmt("L", 1, 1, wire.PhaseExit, 0, nil))
	require.Equal(t, 4, c.runFor(5*time.Second, cl), "no clock runs after the Exit")
}

// A restarted server starts the clock of a holding it reloads afresh: it
// refuses the lease one max-hold after its restart, not before.
func TestMaxHoldRestartStartsTheClockAfresh(t *testing.T) {
	c := newMaxHoldCluster(t, 3*time.Second)
	cl := c.newClient()
	c.enterTicket(cl, "L", 1, 1, 1)
	c.submitAll(cl, cl.stmt("L", 1, 1, wire.PhaseHeld, 1, nil))
	require.Equal(t, 4, c.runFor(2*time.Second, cl))
	c.restart(0)
	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	c.replies(cl.id)
	require.Equal(t, 1, c.runFor(2*time.Second, cl), "the others refuse; the restarted server does not yet")
	c.runFor(time.Second, cl)
	require.Equal(t, 0, c.leaseOK(cl, 1), "the restarted server refuses one max-hold after its restart")
}
