package core

import (
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// J whose views show different member sets is legitimate (§3.1: no agreement
// on the set is needed, the max over any q fresh views is safe): it is
// accepted with N = 1 + max over all of them — harmless, never a verdict.
func TestJustificationWithMixedMemberSetsAccepted(t *testing.T) {
	c := newCluster(t, 4, 1)
	early, x := c.newClient(), c.newClient()
	ej := c.doorway(early, "L", 1, 1)
	c.flush()
	et := early.stmt("L", 1, 1, wire.PhaseTicket, 1, ej)
	// Only servers 0 and 1 hear early's Ticket before x's Doorway (no forwards yet).
	c.fromClient(0, early.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: et, J: ej}})
	c.fromClient(1, early.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: et, J: ej}})
	c.drop()
	j := c.doorway(x, "L", 1, 1)
	// x's views differ: servers 0 and 1 show early's Ticket, server 2 its Doorway.
	var tickets int
	for _, v := range j {
		body, err := v.Verify(c.keys)
		require.NoError(t, err)
		for i := range body.Members {
			st, err := body.Members[i].Verify(c.keys.Cluster)
			require.NoError(t, err)
			if st.Client == early.id && st.Phase == wire.PhaseTicket {
				tickets++
			}
		}
	}
	require.Equal(t, 2, tickets, "the views disagree about early")
	xt := x.stmt("L", 1, 1, wire.PhaseTicket, 2, j)
	for s := range c.cores {
		c.fromClient(s, x.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: xt, J: j}})
	}
	c.flush()
	for s, k := range c.cores {
		require.False(t, k.Banned(x.id), "server %d", s)
		st := k.Register("L", x.id)
		require.Equal(t, uint64(2), st.N, "server %d", s)
	}
}

// A client that never sent a Doorway has no views for its attempt: a Ticket
// with anyone else's views is an invalid justification and convicts it.
func TestTicketWithoutDoorwayBanned(t *testing.T) {
	c := newCluster(t, 4, 1)
	honest, bad := c.newClient(), c.newClient()
	j := c.doorway(honest, "L", 1, 1)
	c.flush()
	tk := bad.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	c.fromClient(0, bad.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: tk, J: j}})
	c.flush()
	for s, k := range c.cores {
		require.True(t, k.Banned(bad.id), "server %d", s)
		require.False(t, k.Banned(honest.id))
	}
}

// A Ticket for a lock the client never entered (views of another lock) is
// an invalid justification too.
func TestTicketForAnotherLockBanned(t *testing.T) {
	c := newCluster(t, 4, 1)
	bad := c.newClient()
	j := c.doorway(bad, "A", 1, 1)
	c.flush()
	tk := bad.stmt("B", 1, 1, wire.PhaseTicket, 1, j)
	c.fromClient(2, bad.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	c.flush()
	require.True(t, c.cores[0].Banned(bad.id))
}

// Flooding Listens costs a server one subscription per client and lock, and
// at most T pushes each: the flood replaces, it never accumulates.
func TestListenFloodIsBounded(t *testing.T) {
	c := newCluster(t, 4, 1)
	flooder, other := c.newClient(), c.newClient()
	j := c.doorway(flooder, "L", 1, 1)
	c.flush()
	tk := flooder.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	c.fromClient(0, flooder.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	members := []wire.ClientID{other.id}
	for i := range 5000 {
		c.fromClient(0, flooder.id, &wire.Message{Listen: &wire.Listen{Req: uint64(10 + i), Lock: "L", Session: 1, Attempt: 1, Members: members}})
	}
	require.Equal(t, 1, c.cores[0].locks["L"].Subscribers())
	// A Listen naming more members than the bound is refused with a clear error.
	big := make([]wire.ClientID, c.cores[0].cfg.MaxListenMembers+1)
	for i := range big {
		big[i][0], big[i][1] = byte(i), byte(i>>8)
	}
	c.replies(flooder.id)
	c.fromClient(0, flooder.id, &wire.Message{Listen: &wire.Listen{Req: 9, Lock: "L", Session: 1, Attempt: 1, Members: big}})
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeLimit}, errorCodes(c.replies(flooder.id)))
}

// A client may not plant another client's statements as its own submissions
// (replaying someone else's statements): refused, nothing applied, no verdict.
func TestReplayingAnotherClientsStatementRefused(t *testing.T) {
	c := newCluster(t, 4, 1)
	victim, bad := c.newClient(), c.newClient()
	c.doorway(victim, "L", 1, 1)
	c.flush()
	exit := victim.stmt("L", 1, 1, wire.PhaseExit, 0, nil)
	c.fromClient(0, bad.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: exit}})
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeRejected}, errorCodes(c.replies(bad.id)))
	require.True(t, isMember(c.cores[0], "L", victim.id), "the victim's Doorway stands")
	require.False(t, c.cores[0].Banned(victim.id))
}
