package core

import (
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// docs/protocol.md change 60: one attempt, one mode. A Ticket or Held whose
// mode differs from its attempt's statement here is refused; the same
// mode is taken.
func TestOneAttemptOneMode(t *testing.T) {
	c := newCluster(t, 4, 1)
	x := c.newClient()
	x.holding = wire.Holding{Mode: wire.ModeShared}
	j := c.doorway(x, "L", 1, 1)
	x.holding = wire.Holding{Mode: wire.ModePermits, Permits: 3}
	c.fromClient(0, x.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: x.stmt("L", 1, 1, wire.PhaseTicket, 1, j), J: j}})
	rs := c.replies(x.id)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Error, "%s", rs[0])
	require.Equal(t, wire.ErrCodeRejected, rs[0].Error.Code)
	require.Contains(t, rs[0].Error.Detail, "asks for a 3 permits holding, its attempt's Doorway here a shared one")
	require.Equal(t, wire.PhaseDoorway, c.cores[0].locks["L"].Highest(x.id).St.Phase)

	x.holding = wire.Holding{Mode: wire.ModeShared}
	c.enterTicket(x, "L", 1, 1, 1)
	require.Equal(t, wire.PhaseTicket, c.cores[0].locks["L"].Highest(x.id).St.Phase)
	x.holding = wire.Holding{}
	c.fromClient(0, x.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: x.stmt("L", 1, 1, wire.PhaseHeld, 1, nil)}})
	rs = c.replies(x.id)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Error, "a Held of another mode than its Ticket: %s", rs[0])
	require.Equal(t, wire.ErrCodeRejected, rs[0].Error.Code)
	x.holding = wire.Holding{Mode: wire.ModeShared}
	c.submitAll(x, x.stmt("L", 1, 1, wire.PhaseHeld, 1, nil))
	require.Equal(t, wire.PhaseHeld, c.cores[0].locks["L"].Highest(x.id).St.Phase)
	require.Equal(t, wire.ModeShared, c.cores[0].locks["L"].Highest(x.id).St.Mode)
}

// Change 60: a leader is one holder, so only an exclusive holding may
// proclaim (§11).
func TestOnlyAnExclusiveHolderProclaims(t *testing.T) {
	c := newCluster(t, 4, 1)
	alice := c.newClient()
	alice.holding = wire.Holding{Mode: wire.ModeShared}
	c.enterTicket(alice, "elect/a", 1, 1, 1)
	c.submitAll(alice, alice.stmt("elect/a", 1, 1, wire.PhaseHeld, 1, nil))
	require.Equal(t, wire.ErrCodeRejected, c.proclaim(alice, alice.proclamation("elect/a", 1, 1, 1, 1, "v")))
	require.Empty(t, c.kept(alice, "elect/a"))
}

// Change 60 with change 27: a reader's held Listen is released at once
// when only readers are ahead of it here, and held while a writer is.
func TestAReadersHeldListenPassesReaders(t *testing.T) {
	for _, writerAhead := range []bool{false, true} {
		c := newCluster(t, 4, 1)
		x, w := c.newClient(), c.newClient()
		if !writerAhead {
			x.holding = wire.Holding{Mode: wire.ModeShared}
		}
		c.enterTicket(x, "L", 1, 1, 1)
		w.holding = wire.Holding{Mode: wire.ModeShared}
		c.enterTicket(w, "L", 1, 1, 2)
		c.fromClient(0, w.id, &wire.Message{Listen: &wire.Listen{Req: 3, Lock: "L", Session: 1, Attempt: 1, Members: []wire.ClientID{x.id}, Hold: true}})
		rs := c.replies(w.id)
		if writerAhead {
			require.Empty(t, rs, "a writer ahead holds the reader's Listen")
			continue
		}
		require.Len(t, rs, 1)
		require.NotNil(t, rs[0].Update)
		require.True(t, rs[0].Update.Released, "only a reader ahead: released at once")
		require.Len(t, rs[0].Update.Statements, 1)
	}
}
