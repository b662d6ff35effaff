package core

import (
	"github.com/bq-lock/bq/crypto"
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

func errorCodes(ms []*wire.Message) []wire.ErrorCode {
	var out []wire.ErrorCode
	for _, err := range errorReplies(ms) {
		out = append(out, err.Code)
	}
	return out
}

// errorReplies are the Error replies among ms, in order.
func errorReplies(ms []*wire.Message) []*wire.Error {
	var out []*wire.Error
	for _, m := range ms {
		if m.Error != nil {
			out = append(out, m.Error)
		}
	}
	return out
}

// docs/protocol.md §6: two different statements with one timestamp convict the
// client at the server that sees both, and the forwarded evidence convicts it
// at every correct server.
func TestEquivocationBannedEverywhere(t *testing.T) {
	c := newCluster(t, 4, 1)
	bad := c.newClient()
	j := c.doorway(bad, "L", 1, 1)
	c.flush()
	t1 := bad.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	c.fromClient(0, bad.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: t1, J: j}})
	require.Equal(t, uint64(1), mustN(t, t1))
	// A second Ticket for the same attempt with another N: equivocation.
	t2 := bad.stmt("L", 1, 1, wire.PhaseTicket, 7, j)
	c.fromClient(0, bad.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: t2, J: j}})
	require.Contains(t, errorCodes(c.replies(bad.id)), wire.ErrCodeBanned)
	c.flush()
	for s, k := range c.cores {
		require.True(t, k.Banned(bad.id), "server %d must ban", s)
		require.False(t, isMember(k, "L", bad.id), "server %d must drop the member", s)
	}
	// Everything it sends is refused from now on, and the ban survives a restart.
	c.fromClient(2, bad.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 1}})
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeBanned}, errorCodes(c.replies(bad.id)))
	c.restart(2)
	require.True(t, c.cores[2].Banned(bad.id))
}

func mustN(t *testing.T, ss wire.SignedStatement) uint64 {
	var st wire.Statement
	require.NoError(t, crypto.Unmarshal(ss.Signed.Body, &st))
	return st.N
}

// A Ticket lower (or higher) than its own J justifies is evidence.
func TestUnjustifiedTicketBanned(t *testing.T) {
	for _, n := range []uint64{2, 1 << 40} {
		c := newCluster(t, 4, 1)
		other := c.newClient()
		oj := c.doorway(other, "L", 1, 1)
		c.flush()
		ot := other.stmt("L", 1, 1, wire.PhaseTicket, 1, oj)
		for s := range c.cores {
			c.fromClient(s, other.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: ot, J: oj}})
		}
		c.flush()
		bad := c.newClient()
		j := c.doorway(bad, "L", 1, 1) // J shows other's ticket 1: N must be 2
		c.flush()
		if n == 2 {
			n = 1 // lower than justified
		}
		tk := bad.stmt("L", 1, 1, wire.PhaseTicket, n, j)
		c.fromClient(1, bad.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
		require.Contains(t, errorCodes(c.replies(bad.id)), wire.ErrCodeBanned)
		c.flush()
		for s, k := range c.cores {
			require.True(t, k.Banned(bad.id), "N=%d: server %d must ban", n, s)
			require.True(t, isMember(k, "L", other.id), "the honest client is untouched")
		}
	}
}

// A replayed J (views of an earlier attempt) is an invalid justification.
func TestReplayedJustificationBanned(t *testing.T) {
	c := newCluster(t, 4, 1)
	bad := c.newClient()
	j1 := c.doorway(bad, "L", 1, 1)
	c.flush()
	for s := range c.cores {
		c.fromClient(s, bad.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: bad.stmt("L", 1, 1, wire.PhaseTicket, 1, j1), J: j1}})
		c.fromClient(s, bad.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: bad.stmt("L", 1, 1, wire.PhaseExit, 0, nil)}})
	}
	c.flush()
	c.doorway(bad, "L", 1, 2)
	c.flush()
	replay := bad.stmt("L", 1, 2, wire.PhaseTicket, 1, j1)
	c.fromClient(0, bad.id, &wire.Message{Submit: &wire.Submit{Req: 4, Statement: replay, J: j1}})
	c.flush()
	for s, k := range c.cores {
		require.True(t, k.Banned(bad.id), "server %d", s)
	}
}

// J with fewer than q views is invalid; with the views of one server twice too.
func TestShortOrDuplicatedJustificationBanned(t *testing.T) {
	for _, mangle := range []func([]wire.SignedView) []wire.SignedView{
		func(j []wire.SignedView) []wire.SignedView { return j[:2] },
		func(j []wire.SignedView) []wire.SignedView { return []wire.SignedView{j[0], j[0], j[1]} },
	} {
		c := newCluster(t, 4, 1)
		bad := c.newClient()
		j := mangle(c.doorway(bad, "L", 1, 1))
		c.flush()
		c.fromClient(0, bad.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: bad.stmt("L", 1, 1, wire.PhaseTicket, 1, j), J: j}})
		c.flush()
		require.True(t, c.cores[3].Banned(bad.id))
	}
}

// A Byzantine server cannot frame a correct client: its valid Ticket paired
// with a J it never signed proves nothing, and the J-hash mismatch is only refused.
func TestNoFraming(t *testing.T) {
	c := newCluster(t, 4, 1)
	good := c.newClient()
	j := c.doorway(good, "L", 1, 1)
	c.flush()
	tk := good.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	// Byzantine server 3 sends "evidence": the good Ticket with other views.
	other := c.newClient()
	oj := c.doorway(other, "L", 1, 1)
	c.flush()
	c.fromServer(0, 3, &wire.Message{Evidence: &wire.Evidence{Kind: wire.EvidenceInvalidTicket, A: tk, J: oj}})
	// ... and an "equivocation" of one statement with itself.
	c.fromServer(0, 3, &wire.Message{Evidence: &wire.Evidence{Kind: wire.EvidenceEquivocation, A: tk, B: &tk}})
	require.False(t, c.cores[0].Banned(good.id))
	// The same Ticket submitted with the wrong J by someone relaying it is refused, not a verdict.
	c.fromServer(1, 3, &wire.Message{Forward: &wire.Forward{Statement: tk, J: oj}})
	require.False(t, c.cores[1].Banned(good.id))
	// And the real submission still works everywhere.
	for s := range c.cores {
		c.fromClient(s, good.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	}
	c.flush()
	for s, k := range c.cores {
		require.False(t, k.Banned(good.id), "server %d", s)
		st := k.Register("L", good.id)
		require.Equal(t, wire.PhaseTicket, st.Phase)
	}
}

// Forwarded copies, duplicates and reconnect resends never convict a correct client.
func TestResendsAndForwardsAreNotEvidence(t *testing.T) {
	c := newCluster(t, 4, 1)
	good := c.newClient()
	j := c.doorway(good, "L", 1, 1)
	tk := good.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	held := good.stmt("L", 1, 1, wire.PhaseHeld, 1, nil)
	for s := range c.cores {
		c.fromClient(s, good.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
		c.fromClient(s, good.id, &wire.Message{Submit: &wire.Submit{Req: 0, Statement: held}})
		// A reconnect resends the Ticket, then the Held.
		c.fromClient(s, good.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
		c.fromClient(s, good.id, &wire.Message{Submit: &wire.Submit{Req: 0, Statement: held}})
	}
	c.flush() // the late forwarded Doorways and Tickets arrive after the Held
	for s, k := range c.cores {
		require.False(t, k.Banned(good.id), "server %d", s)
		require.Equal(t, uint64(0), k.Stats.Bans)
	}
}
