package core

// Table-driven tests of the server's decision rules that the end-to-end
// tests of this package leave implicit: settling a listener's member, the
// refusal of a reset session, a Held that must follow its Ticket, the
// Doorway deadline, and what must be durable before an ack and survive a
// restart (hw, votes, certificates). Each rule has a source mutant in
// test/mutate that these tests kill (docs/fault-model.md, "Source mutants").

import (
	"testing"
	"time"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// change 15, §3.3: a Listen drops member x once x's value at this server
// lets the listener pass x for good, by the listener's own rule: an Exit, a
// reset, or a ticket after the listener's in token order. Nothing else.
func TestSettledRule(t *testing.T) {
	c := newCluster(t, 4, 1)
	me, x := c.newClient(), c.newClient()
	const mine = 5
	var xAhead, xBehind uint64 // equal tickets that x wins, and loses, on the tie-break
	for n := uint64(1); n <= 256 && (xAhead == 0 || xBehind == 0); n++ {
		if (bakery.Token{N: n, Client: x.id}).Less(bakery.Token{N: n, Client: me.id}) {
			xAhead = n
		} else {
			xBehind = n
		}
	}
	require.True(t, xAhead > 0 && xBehind > 0, "in 256 equal tickets each side should win a tie-break: it is not H(N‖id)")
	entry := func(ph wire.Phase, n uint64) *activeset.Entry {
		return &activeset.Entry{St: &wire.Statement{Lock: "L", Client: x.id, Session: 1, Attempt: 1, Phase: ph, N: n}}
	}
	for _, tc := range []struct {
		name    string
		mine    uint64
		en      *activeset.Entry
		settled bool
	}{
		{"no statement here (the absence rule needs q servers)", mine, nil, false},
		{"choosing", mine, entry(wire.PhaseDoorway, 0), false},
		{"exited", mine, entry(wire.PhaseExit, 0), true},
		{"a lower ticket", mine, entry(wire.PhaseTicket, mine-1), false},
		{"a higher ticket", mine, entry(wire.PhaseTicket, mine+1), true},
		{"holding a lower ticket", mine, entry(wire.PhaseHeld, mine-1), false},
		{"holding a higher ticket", mine, entry(wire.PhaseHeld, mine+1), true},
		{"an equal ticket x wins on the tie-break", xAhead, entry(wire.PhaseTicket, xAhead), false},
		{"an equal ticket x loses on the tie-break", xBehind, entry(wire.PhaseTicket, xBehind), true},
	} {
		got := settledFor(bakery.Token{N: tc.mine, Client: me.id}, wire.Holding{})(x.id, tc.en)
		require.Equal(t, tc.settled, got, tc.name)
	}

	// Change 60: a reader's Listen is settled by a reader's statement in
	// any phase; a permits Listen by nothing more than an exclusive one (a
	// compatible member ahead counts until it exits).
	sh, p2 := wire.Holding{Mode: wire.ModeShared}, wire.Holding{Mode: wire.ModePermits, Permits: 2}
	in := func(h wire.Holding, ph wire.Phase, n uint64) *activeset.Entry {
		en := entry(ph, n)
		en.St.Mode, en.St.Permits = h.Mode, h.Permits
		return en
	}
	for _, tc := range []struct {
		name    string
		me      wire.Holding
		en      *activeset.Entry
		settled bool
	}{
		{"a reader choosing, for a reader", sh, in(sh, wire.PhaseDoorway, 0), true},
		{"a reader ahead, for a reader", sh, in(sh, wire.PhaseTicket, mine-1), true},
		{"a reader holding ahead, for a reader", sh, in(sh, wire.PhaseHeld, mine-1), true},
		{"a writer ahead, for a reader", sh, entry(wire.PhaseTicket, mine-1), false},
		{"a writer choosing, for a reader", sh, entry(wire.PhaseDoorway, 0), false},
		{"a permit holder ahead, for a reader", sh, in(p2, wire.PhaseHeld, mine-1), false},
		{"a reader ahead, for a writer", wire.Holding{}, in(sh, wire.PhaseTicket, mine-1), false},
		{"a permit holder of the same count ahead", p2, in(p2, wire.PhaseHeld, mine-1), false},
		{"a permit holder behind", p2, in(p2, wire.PhaseTicket, mine+1), true},
	} {
		got := settledFor(bakery.Token{N: mine, Client: me.id}, tc.me)(x.id, tc.en)
		require.Equal(t, tc.settled, got, tc.name)
	}
}

// certify makes a reset certificate on (client, sess) of the votes of
// servers 0..votes−1.
func (c *cluster) certify(client wire.ClientID, sess uint64, votes int) *wire.ResetCertificate {
	cert := &wire.ResetCertificate{Client: client, Session: sess}
	for s := range votes {
		v, err := wire.SignSuspect(c.signers[s], c.keys.Cluster, &wire.SuspectBody{Client: client, Session: sess, Server: wire.ServerID(s), Reason: wire.SuspectMute, Epoch: c.keys.Epoch})
		require.NoError(c.t, err)
		cert.Votes = append(cert.Votes, v)
	}
	return cert
}

// §5: once a certificate reset a session, a server refuses every statement
// of it, an Exit too (which needs no lease); the certificate collects the
// session's register value (change 22), and a refused statement brings
// nothing back.
func TestResetSessionRefused(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	c.doorway(cl, "L", 1, 1)
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, c.cores[0].q)})
	require.Nil(t, c.cores[0].Register("L", cl.id), "the reset session's value is collected")
	c.replies(cl.id)
	for _, ss := range []wire.SignedStatement{
		cl.stmt("L", 1, 1, wire.PhaseExit, 0, nil),
		cl.stmt("L", 1, 2, wire.PhaseDoorway, 0, nil),
	} {
		c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 7, Statement: ss}})
		require.Equal(t, []wire.ErrorCode{wire.ErrCodeSuspected}, errorCodes(c.replies(cl.id)))
		require.Nil(t, c.cores[0].Register("L", cl.id))
		require.Zero(t, c.cores[0].ClientFootprint(cl.id).Locks, "a refused statement leaves no lock behind")
		c.fromServer(0, 2, &wire.Message{Forward: &wire.Forward{Statement: ss}})
		require.Nil(t, c.cores[0].Register("L", cl.id), "nor from a peer")
		require.Zero(t, c.cores[0].ClientFootprint(cl.id).Locks, "nor does a refused Forward")
	}
	// The next session is welcome.
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 8, Statement: cl.stmt("L", 2, 3, wire.PhaseDoorway, 0, nil)}})
	require.Empty(t, errorCodes(c.replies(cl.id)))
}

// §6: a Held is applied only after this server's Ticket of the same
// attempt and N (so its fencing token is the Ticket's).
func TestHeldMustFollowItsTicket(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	j := c.doorway(cl, "L", 1, 1)
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: cl.stmt("L", 1, 1, wire.PhaseTicket, 1, j), J: j}})
	c.replies(cl.id)
	for _, tc := range []struct {
		name string
		held wire.SignedStatement
		code []wire.ErrorCode
	}{
		{"another N", cl.stmt("L", 1, 1, wire.PhaseHeld, 2, nil), []wire.ErrorCode{wire.ErrCodeResend}},
		{"another attempt", cl.stmt("L", 1, 2, wire.PhaseHeld, 1, nil), []wire.ErrorCode{wire.ErrCodeResend}},
		{"its Ticket's N", cl.stmt("L", 1, 1, wire.PhaseHeld, 1, nil), nil},
	} {
		c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: tc.held}})
		require.Equal(t, tc.code, errorCodes(c.replies(cl.id)), tc.name)
	}
	st := c.cores[0].Register("L", cl.id)
	require.Equal(t, wire.PhaseHeld, st.Phase)
	require.Equal(t, uint64(1), st.N)
}

// §5: a client that stays in its Doorway past the deadline is refused by
// the server even though it heartbeats; one that took its Ticket is not.
func TestDoorwayDeadlineAtTheServer(t *testing.T) {
	c := newCluster(t, 4, 1)
	stuck, fine := c.newClient(), c.newClient()
	j := c.doorway(fine, "L", 1, 1)
	c.fromClient(0, fine.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: fine.stmt("L", 1, 1, wire.PhaseTicket, 1, j), J: j}})
	c.fromClient(0, stuck.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	c.fromClient(0, stuck.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: stuck.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)}})
	deadline := c.cores[0].cfg.DoorwayDeadline
	leaseOK := func(cl *client) bool {
		var ok *bool
		for _, m := range c.replies(cl.id) {
			if m.SessionAck != nil {
				ok = &m.SessionAck.LeaseOK
			}
		}
		require.NotNil(t, ok)
		return *ok
	}
	for i, start := uint64(1), c.now; c.now.Sub(start) < deadline+2*time.Second; i++ {
		c.now = c.now.Add(time.Second)
		c.effects(0, c.cores[0].Tick(c.now))
		c.fromClient(0, stuck.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: i}})
		c.fromClient(0, fine.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: i}})
		past := c.now.Sub(start) > deadline
		require.Equal(t, !past, leaseOK(stuck), "after %v in the Doorway", c.now.Sub(start))
		require.True(t, leaseOK(fine))
	}
}

// §9 with changes 13 and 29: every accepted statement is durable before
// its ack, except a Held and an Exit, which may wait for the next commit
// (with the deletion of the J an Exit ends).
func TestOnlyHeldAndExitAreLazy(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	j := c.doorway(cl, "L", 1, 1)
	for _, tc := range []struct {
		name  string
		st    wire.SignedStatement
		j     []wire.SignedView
		eager bool
	}{
		{"Ticket", cl.stmt("L", 1, 1, wire.PhaseTicket, 1, j), j, true},
		{"Held", cl.stmt("L", 1, 1, wire.PhaseHeld, 1, nil), nil, false},
		{"Exit", cl.stmt("L", 1, 1, wire.PhaseExit, 0, nil), nil, false},
		{"Doorway", cl.stmt("L", 1, 2, wire.PhaseDoorway, 0, nil), nil, true},
	} {
		c.now = c.now.Add(time.Millisecond)
		e := c.cores[0].Step(c.now, Input{From: wire.ClientPeer(cl.id), Msg: &wire.Message{Submit: &wire.Submit{Req: 5, Statement: tc.st, J: tc.j}}})
		c.effects(0, e)
		stmts := 0
		for _, r := range e.Persist {
			if r.Bucket == bucketStmt {
				stmts++
				require.Equal(t, !tc.eager, r.Lazy, tc.name)
			}
		}
		require.Equal(t, 1, stmts, tc.name)
		require.Equal(t, tc.eager, Eager(e.Persist), tc.name)
	}
}

// §3.1, §7, §9: a View carries the lock's hw, which survives the holder's
// Exit and a restart: the next ticket is above every earlier one.
func TestHighWaterSurvivesRestart(t *testing.T) {
	c := newCluster(t, 4, 1)
	a, b := c.newClient(), c.newClient()
	j := c.doorway(a, "L", 1, 1)
	for s := range c.cores {
		c.fromClient(s, a.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: a.stmt("L", 1, 1, wire.PhaseTicket, 1, j), J: j}})
		c.fromClient(s, a.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: a.stmt("L", 1, 1, wire.PhaseExit, 0, nil)}})
	}
	hwOf := func(v wire.SignedView) uint64 {
		body, err := v.Verify(c.keys)
		require.NoError(t, err)
		require.Equal(t, wire.ServerID(0), body.Server)
		require.Empty(t, body.Members, "a has exited")
		require.NotNil(t, body.HW, "the View of server 0 has no hw")
		st, err := body.HW.Verify(c.keys.Cluster)
		require.NoError(t, err)
		return st.N
	}
	jb := c.doorway(b, "L", 1, 1)
	require.Equal(t, uint64(1), hwOf(jb[0]))
	c.restart(0)
	jb = c.doorway(b, "L", 1, 2)
	require.Equal(t, uint64(1), hwOf(jb[0]), "after a restart")
	n, err := bakery.TicketFromJustification(jb, c.keys, c.cores[0].q, bakery.Attempt{Lock: "L", Client: b.id, Session: 1, Attempt: 2}, c.cores[0].verify, nil)
	require.NoError(t, err)
	require.Equal(t, uint64(2), n)
}

// §5, §9: a server that voted against a session keeps refusing it after a
// restart (its vote is on disk), even though the client's statements bring
// the session back to its attention.
func TestVoteSurvivesRestart(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 1000}})
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: cl.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)}})
	c.now = c.now.Add(2 * time.Second)
	c.effects(0, c.cores[0].Tick(c.now))
	require.Equal(t, uint64(1), c.cores[0].Stats.VotesCast)
	require.Len(t, c.disks[0][bucketVote], 1, "the vote is on disk")
	c.restart(0)
	c.replies(cl.id)
	c.fromClient(0, cl.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 1}})
	got := c.replies(cl.id)
	require.Len(t, got, 1)
	require.NotNil(t, got[0].SessionAck)
	require.False(t, got[0].SessionAck.LeaseOK, "the restarted server forgot its vote")
	require.Equal(t, 1, c.cores[0].mute.VoteCount(cl.id, 1))
}

// §5, §9: a reset certificate is on disk, and a restarted server still
// holds the client's statements of that session void.
func TestCertificateSurvivesRestart(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	c.doorway(cl, "L", 1, 1)
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, c.cores[0].q)})
	require.Len(t, c.disks[0][bucketCert], 1, "the certificate is on disk")
	require.Empty(t, c.disks[0][bucketStmt], "the value it voids is not")
	c.restart(0)
	require.Nil(t, c.cores[0].Register("L", cl.id))
	require.Equal(t, uint64(1), c.cores[0].ResetUpTo(cl.id))
	require.Zero(t, c.cores[0].LockCount(), "a lock with no value, no listener and no hw is not kept")
	// A Doorway of the reset session replayed to the restarted server is refused.
	c.fromServer(0, 2, &wire.Message{Forward: &wire.Forward{Statement: cl.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)}})
	require.Nil(t, c.cores[0].Register("L", cl.id))
}
