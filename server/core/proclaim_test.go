package core

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

func (cl *client) proclamation(lock string, sess, att, n, rev uint64, value string) wire.SignedProclamation {
	p, err := wire.SignProclamation(cl.key, cl.cluster, &wire.ProclamationBody{Lock: lock, Client: cl.id, Session: sess, Attempt: att, N: n, Rev: rev, Value: []byte(value)})
	require.NoError(cl.t, err)
	return p
}

// proclaim sends p as from to server 0 and returns its answer: Ack or the
// Error's code.
func (c *cluster) proclaim(from *client, p wire.SignedProclamation) wire.ErrorCode {
	c.fromClient(0, from.id, &wire.Message{Proclaim: &wire.Proclaim{Req: 9, Proclamation: p}})
	rs := c.replies(from.id)
	require.Len(c.t, rs, 1)
	if rs[0].Ack != nil {
		require.Equal(c.t, uint64(9), rs[0].Ack.Req)
		return 0
	}
	require.NotNil(c.t, rs[0].Error, "answer %s", rs[0])
	return rs[0].Error.Code
}

// kept is the values of the proclamations server 0 shows for lock.
func (c *cluster) kept(asker *client, lock string) []string {
	c.fromClient(0, asker.id, &wire.Message{Status: &wire.Status{Req: 1, Lock: lock}})
	rs := c.replies(asker.id)
	require.Len(c.t, rs, 1)
	var out []string
	for _, p := range rs[0].StatusReply.Proclamations {
		b, err := p.Verify(c.keys.Cluster)
		require.NoError(c.t, err)
		out = append(out, string(b.Value))
	}
	require.Equal(c.t, c.cores[0].recountStateBytes(), c.cores[0].stateBytes)
	return out
}

// The rules of docs/protocol.md §11 at one server: a proclamation is kept
// only for the client's present Ticket or Held, only its own, newer revs
// replace it, and the register's next attempt or Exit drops it.
func TestProclamationRules(t *testing.T) {
	c := newCluster(t, 4, 1)
	alice, bob := c.newClient(), c.newClient()
	const lock = "elect/a"

	require.Equal(t, wire.ErrCodeResend, c.proclaim(alice, alice.proclamation(lock, 1, 1, 1, 1, "early")), "no register yet")
	c.enterTicket(alice, lock, 1, 1, 1)
	c.submitAll(alice, alice.stmt(lock, 1, 1, wire.PhaseHeld, 1, nil))

	require.Equal(t, wire.ErrCodeResend, c.proclaim(alice, alice.proclamation(lock, 1, 2, 1, 1, "x")), "another attempt")
	require.Equal(t, wire.ErrCodeResend, c.proclaim(alice, alice.proclamation(lock, 1, 1, 2, 1, "x")), "another ticket")
	require.Equal(t, wire.ErrCodeRejected, c.proclaim(bob, alice.proclamation(lock, 1, 1, 1, 1, "x")), "bob sends alice's")
	require.Empty(t, c.kept(bob, lock))

	require.Zero(t, c.proclaim(alice, alice.proclamation(lock, 1, 1, 1, 1, "v1")))
	require.Equal(t, []string{"v1"}, c.kept(bob, lock))
	require.Zero(t, c.proclaim(alice, alice.proclamation(lock, 1, 1, 1, 1, "v1")), "a resend of the same bytes")
	require.Equal(t, wire.ErrCodeRejected, c.proclaim(alice, alice.proclamation(lock, 1, 1, 1, 1, "other")), "same rev, other value")
	require.Zero(t, c.proclaim(alice, alice.proclamation(lock, 1, 1, 1, 3, "v3")))
	require.Equal(t, wire.ErrCodeRejected, c.proclaim(alice, alice.proclamation(lock, 1, 1, 1, 2, "v2")), "older rev")
	require.Equal(t, []string{"v3"}, c.kept(bob, lock))

	c.submitAll(alice, alice.stmt(lock, 1, 1, wire.PhaseExit, 0, nil))
	require.Empty(t, c.kept(bob, lock), "the Exit drops it")
	require.Equal(t, wire.ErrCodeResend, c.proclaim(alice, alice.proclamation(lock, 1, 1, 1, 4, "late")), "after the Exit")
	require.Empty(t, c.kept(bob, lock))
	require.Zero(t, c.cores[0].stateBytes-c.cores[0].recountStateBytes())
}

// A Ticket's proclamation (sent before its Held reached the server) is
// kept, and stays when the Held arrives.
func TestProclamationOutlivesTicketToHeld(t *testing.T) {
	c := newCluster(t, 4, 1)
	alice, bob := c.newClient(), c.newClient()
	c.enterTicket(alice, "L", 1, 1, 1)
	require.Zero(t, c.proclaim(alice, alice.proclamation("L", 1, 1, 1, 1, "v")))
	c.submitAll(alice, alice.stmt("L", 1, 1, wire.PhaseHeld, 1, nil))
	require.Equal(t, []string{"v"}, c.kept(bob, "L"))
	// The next attempt's Doorway drops it.
	c.doorway(alice, "L", 1, 2)
	require.Empty(t, c.kept(bob, "L"))
}

// A Status reply carries the proclamations of Held members only, lowest
// token first, at most maxStatusProclamations: its size does not grow with
// the members that claim Held and proclaim.
func TestStatusProclamationsBounded(t *testing.T) {
	c := newCluster(t, 4, 1)
	observer := c.newClient()
	var values []string
	for i := range maxStatusProclamations + 2 {
		cl := c.newClient()
		n := uint64(i + 1)
		c.enterTicket(cl, "L", 1, 1, n)
		v := string(rune('a' + i))
		if i == 0 {
			// The lowest ticket proclaims while still in Ticket phase: not shown.
			require.Zero(t, c.proclaim(cl, cl.proclamation("L", 1, 1, n, 1, v)))
			continue
		}
		c.submitAll(cl, cl.stmt("L", 1, 1, wire.PhaseHeld, n, nil))
		require.Zero(t, c.proclaim(cl, cl.proclamation("L", 1, 1, n, 1, v)))
		values = append(values, v)
	}
	require.Equal(t, values[:maxStatusProclamations], c.kept(observer, "L"))
}
