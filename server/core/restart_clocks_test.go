package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// What a server restarted from its disk restores, or starts afresh, of its
// detectors' clocks (issue 27, point 5): the Doorway deadline, the max-hold
// clock, the leases of reset and live sessions, and probation. Each test
// pins both sides of its rule — the restarted server does not act before the
// clock it restarted runs out, and does act once it has — at explicit times
// on one server (the core is a pure state machine: Tick(now), no sleeping).
// TestRestartKeepsTheClientsTTL (restart_test.go) already pins the lease of a
// session whose client asked for a TTL other than the server's default.

// restartTickBeat drives server s alone at now: one Tick, then a heartbeat
// of cl's session sess. It reports whether s answered "lease ok" and the
// votes the Tick cast; what s sent to other servers is dropped.
func restartTickBeat(c *cluster, s int, cl *client, sess uint64, now time.Time) (ok bool, votes []*wire.SuspectBody) {
	c.t.Helper()
	votes = restartTick(c, s, now)
	c.effects(s, c.cores[s].Step(now, Input{From: wire.ClientPeer(cl.id), Msg: &wire.Message{Heartbeat: &wire.Heartbeat{Session: sess, Seq: 1}}}))
	acks := 0
	for _, m := range c.replies(cl.id) {
		if m.SessionAck != nil {
			acks++
			ok = m.SessionAck.LeaseOK
		}
	}
	require.Equal(c.t, 1, acks, "one answer to the heartbeat")
	return ok, votes
}

// restartTick ticks server s alone at now and returns the votes it cast.
func restartTick(c *cluster, s int, now time.Time) []*wire.SuspectBody {
	c.t.Helper()
	c.now = now
	e := c.cores[s].Tick(now)
	var votes []*wire.SuspectBody
	for _, o := range e.Send {
		if o.To.IsClient && o.Msg.Suspect != nil {
			body, err := o.Msg.Suspect.Verify(c.keys)
			require.NoError(c.t, err)
			votes = append(votes, body)
		}
	}
	c.effects(s, e)
	c.drop()
	return votes
}

// docs/protocol.md §5 (Doorway deadline) and change 4, with §9 and change 24
// ("bounded, as for the Doorway deadline"): a client that stays in its
// Doorway longer than DoorwayDeadline has its session refused (heartbeats
// answered "not ok"), and the server votes when the lease runs out. A
// restarted server starts the deadline of every Doorway it reloads afresh,
// at its first tick: it refuses the session no earlier than one whole
// deadline after the restart — however long the Doorway had lasted, even if
// it had already been refused before (the refusal is not on disk) — and does
// refuse it then, voting (SuspectDoorway) once the lease the last renewal
// gave runs out. So a restart lengthens a Doorway by at most one deadline.
func TestRestartStartsTheDoorwayDeadlineAfresh(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before time.Duration // how long the Doorway lasted before the crash
	}{
		{"crashed within the deadline", 6 * time.Second},
		{"crashed after the deadline refused the session", 12 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 4, 1)
			cl := c.newClient()
			const s = 2
			const ttl = 5 * time.Second // below the deadline: the lease needs renewing
			deadline := c.cores[s].cfg.DoorwayDeadline
			require.Greater(t, deadline, ttl)
			c.fromClient(s, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: uint32(ttl / time.Millisecond)}})
			c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: cl.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)}})
			require.NotNil(t, c.replies(cl.id)[1].ViewReply)
			entered := c.now

			// Before the crash: renewed while in the Doorway, refused from the deadline on.
			for at := entered.Add(time.Second); !at.After(entered.Add(tc.before)); at = at.Add(time.Second) {
				ok, votes := restartTickBeat(c, s, cl, 1, at)
				require.Equal(t, at.Sub(entered) < deadline, ok, "%v in the Doorway, before the crash", at.Sub(entered))
				require.Empty(t, votes, "the lease lives: no vote yet")
			}
			require.True(t, isMember(c.cores[s], "L", cl.id))

			c.restart(s)
			restarted := entered.Add(tc.before + 500*time.Millisecond)
			require.Empty(t, restartTick(c, s, restarted), "the first tick starts the clocks")
			require.True(t, isMember(c.cores[s], "L", cl.id), "the Doorway is reloaded")

			// Not before one whole deadline from the restart...
			for at := restarted.Add(time.Second); at.Before(restarted.Add(deadline)); at = at.Add(time.Second) {
				ok, votes := restartTickBeat(c, s, cl, 1, at)
				require.True(t, ok, "%v after the restart: within one deadline of it", at.Sub(restarted))
				require.Empty(t, votes)
			}
			last := restarted.Add(deadline - time.Millisecond)
			ok, votes := restartTickBeat(c, s, cl, 1, last)
			require.True(t, ok, "the last instant within one deadline of the restart")
			require.Empty(t, votes)

			// ...and at it: refused; the vote comes when the lease the last
			// renewal gave runs out (change 4), with the Doorway as reason.
			ok, votes = restartTickBeat(c, s, cl, 1, restarted.Add(deadline))
			require.False(t, ok, "one whole deadline after the restart the session is refused")
			require.Empty(t, votes, "refused, not voted on: the lease still lives")
			require.Empty(t, restartTick(c, s, last.Add(ttl-time.Millisecond)))
			votes = restartTick(c, s, last.Add(ttl))
			require.Len(t, votes, 1, "the refused lease ran out")
			require.Equal(t, uint64(1), votes[0].Session)
			require.Equal(t, wire.SuspectDoorway, votes[0].Reason)
		})
	}
}

// docs/protocol.md change 24 (and §5's pointer to it): a server runs one
// hold clock per (client, lock), started at the attempt's Held, or
// HeldDeadline (the Doorway deadline) after its Ticket was first the lock's
// least with no Held; past the max-hold it refuses the session's lease and
// votes when that runs out. "A restarted server starts the clocks of the
// holdings it reloads afresh, so a restart can lengthen a holding by at most
// one max-hold": a reloaded Held's clock starts at the restart, a reloaded
// least Ticket's HeldDeadline after it — never earlier (the time before the
// crash does not count) and never later (the restart does not drop it).
func TestRestartStartsTheHoldClockAfresh(t *testing.T) {
	const maxHold = 3 * time.Second
	for _, tc := range []struct {
		name   string
		held   bool
		before time.Duration // how long the holding lasted before the crash
	}{
		{"a Held", true, 2 * time.Second},
		{"a least Ticket never followed by its Held", false, 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newMaxHoldCluster(t, maxHold)
			cl := c.newClient()
			const s = 0
			const ttl = 5 * time.Second // enterTicket's sessions
			heldDeadline := c.cores[s].cfg.DoorwayDeadline
			c.enterTicket(cl, "L", 1, 1, 1)
			if tc.held {
				c.submitAll(cl, cl.stmt("L", 1, 1, wire.PhaseHeld, 1, nil))
			}
			c.drop()
			entered := c.now
			for at := entered.Add(500 * time.Millisecond); !at.After(entered.Add(tc.before)); at = at.Add(500 * time.Millisecond) {
				ok, votes := restartTickBeat(c, s, cl, 1, at)
				require.True(t, ok, "%v into the holding, before the crash", at.Sub(entered))
				require.Empty(t, votes)
			}
			// Had the clock kept its start from before the crash, it would
			// cut the holding 0.5 s (Held) or 4.5 s (Ticket) after the
			// restart, well within the fresh clock checked below.

			c.restart(s)
			restarted := entered.Add(tc.before + 500*time.Millisecond)
			require.Empty(t, restartTick(c, s, restarted), "the first tick starts the clocks")
			start := restarted
			if !tc.held {
				start = restarted.Add(heldDeadline)
			}
			cut := start.Add(maxHold)

			// Not before one max-hold from the clock's fresh start...
			for at := restarted.Add(500 * time.Millisecond); at.Before(cut); at = at.Add(500 * time.Millisecond) {
				ok, votes := restartTickBeat(c, s, cl, 1, at)
				require.True(t, ok, "%v after the restart: within its max-hold", at.Sub(restarted))
				require.Empty(t, votes)
			}
			last := cut.Add(-time.Millisecond)
			ok, votes := restartTickBeat(c, s, cl, 1, last)
			require.True(t, ok, "the last instant within its max-hold")
			require.Empty(t, votes)

			// ...and at it: refused, voted on when the lease runs out.
			ok, votes = restartTickBeat(c, s, cl, 1, cut)
			require.False(t, ok, "one max-hold after the fresh start the session is refused")
			require.Empty(t, votes, "refused, not voted on: the lease still lives")
			require.True(t, isMember(c.cores[s], "L", cl.id))
			require.Empty(t, restartTick(c, s, last.Add(ttl-time.Millisecond)))
			votes = restartTick(c, s, last.Add(ttl))
			require.Len(t, votes, 1, "the refused lease ran out")
			require.Equal(t, uint64(1), votes[0].Session)
		})
	}
}

// docs/protocol.md change 24 with change 23: the max-hold a server applies
// is the one of the certificate the client connected with, else the
// server's default; and a restarted server starts the clocks of the holdings
// it reloads afresh. A restarted server does not know the client's
// certificate until the client connects again, so the clock of a reloaded
// Held must run with the certificate's max-hold once it does: cut one
// max-hold after the restart, as at a server that never restarted.
func TestRestartHoldClockTakesTheCertificatesMaxHold(t *testing.T) {
	const maxHold = 3 * time.Second
	for _, tc := range []struct {
		name string
		dflt time.Duration
	}{
		{"the server's default is longer", time.Hour},
		{"the server has no default", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClosedCluster(t, 4, 1)
			c.maxHold = tc.dflt
			for i := range c.cores {
				c.cores[i] = c.newCore(i, 4, 1)
			}
			cl := c.newClient()
			grant := &wire.AdmissionBody{Name: "short", Client: cl.id, MaxHoldMillis: uint64(maxHold / time.Millisecond)}
			c.connect(cl, grant)
			const s = 0
			c.enterTicket(cl, "L", 1, 1, 1)
			c.submitAll(cl, cl.stmt("L", 1, 1, wire.PhaseHeld, 1, nil))
			c.drop()
			entered := c.now

			c.restart(s)
			restarted := entered.Add(time.Second)
			require.Empty(t, restartTick(c, s, restarted))
			c.now = restarted.Add(100 * time.Millisecond)
			c.effects(s, c.cores[s].Step(c.now, Input{Kind: InputConnected, From: wire.ClientPeer(cl.id), Admission: windowed(grant)}))

			// A server that did not restart cuts the holding at the
			// certificate's max-hold, whatever its default.
			const other = 1
			ok, _ := restartTickBeat(c, other, cl, 1, entered.Add(maxHold-500*time.Millisecond))
			require.True(t, ok)
			ok, _ = restartTickBeat(c, other, cl, 1, entered.Add(maxHold))
			require.False(t, ok, "a server that did not restart refuses at the certificate's max-hold")

			cut := restarted.Add(maxHold)
			for at := restarted.Add(500 * time.Millisecond); at.Before(cut); at = at.Add(500 * time.Millisecond) {
				ok, _ := restartTickBeat(c, s, cl, 1, at)
				require.True(t, ok, "%v after the restart: within the certificate's max-hold", at.Sub(restarted))
			}
			ok, _ = restartTickBeat(c, s, cl, 1, cut.Add(-time.Millisecond))
			require.True(t, ok)
			ok, _ = restartTickBeat(c, s, cl, 1, cut)
			require.False(t, ok, "one of the certificate's max-holds after the restart the session is refused")
		})
	}
}

// docs/protocol.md §9 (and §5, change 22): a restarted server "starts a
// lease on every remembered session that is not reset, with the client's
// own TTL, running a whole TTL from its first tick", and a certificate's
// session stays reset: no lease, so no vote on it ever, heartbeats and
// SessionOpens answered "not ok", its statements refused (also by forward)
// — even if its TTL record were still on disk (a disk written before change
// 22). Here one client has session 1 reset and session 2 live; the server
// was down for an hour, longer than any lease, and votes on session 2 one
// whole TTL after its restart, not before, and on session 1 never.
func TestRestartKeepsResetSessionsResetAndLeasesTheRest(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	const s = 2
	const ttl1, ttl2 = 2 * time.Second, 20 * time.Second
	c.fromClient(s, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: uint32(ttl1 / time.Millisecond)}})
	c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: cl.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)}})
	c.fromClient(s, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 2, TTLMillis: uint32(ttl2 / time.Millisecond)}})
	c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: cl.stmt("M", 2, 1, wire.PhaseDoorway, 0, nil)}})
	c.replies(cl.id)
	c.fromServer(s, 0, &wire.Message{Reset: c.certify(cl.id, 1, c.cores[s].q)})
	c.drop()
	c.replies(cl.id)
	require.Equal(t, uint64(1), c.cores[s].ResetUpTo(cl.id))
	disk := c.disks[s]
	require.NotContains(t, disk[bucketTTL], string(voteKey(cl.id, 1)), "the certificate deleted session 1's TTL")
	require.Contains(t, disk[bucketTTL], string(voteKey(cl.id, 2)))
	// As a disk written before change 22 would still hold it:
	disk[bucketTTL][string(voteKey(cl.id, 1))] = ttlRecord(cl.id, 1, ttl1, nil).Value

	c.restart(s)
	k := c.cores[s]
	restarted := c.now.Add(time.Hour)
	require.Empty(t, restartTick(c, s, restarted), "the first tick starts the leases")
	require.Equal(t, uint64(1), k.ResetUpTo(cl.id))
	require.False(t, k.mute.LeaseOK(cl.id, 1, restarted), "no lease on the reset session")
	require.True(t, k.mute.LeaseOK(cl.id, 2, restarted), "a fresh lease on the live one")
	require.Nil(t, k.Register("L", cl.id))
	require.NotNil(t, k.Register("M", cl.id))

	// The reset session stays refused, whatever the client (or a peer) sends.
	at := restarted.Add(time.Second)
	c.now = at
	c.effects(s, k.Step(at, Input{From: wire.ClientPeer(cl.id), Msg: &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 1}}}))
	c.effects(s, k.Step(at, Input{From: wire.ClientPeer(cl.id), Msg: &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}}}))
	c.effects(s, k.Step(at, Input{From: wire.ClientPeer(cl.id), Msg: &wire.Message{Submit: &wire.Submit{Req: 3, Statement: cl.stmt("L", 1, 2, wire.PhaseDoorway, 0, nil)}}}))
	c.effects(s, k.Step(at, Input{From: wire.ServerPeer(0), Msg: &wire.Message{Forward: &wire.Forward{Statement: cl.stmt("L", 1, 3, wire.PhaseDoorway, 0, nil)}}}))
	c.drop()
	var acks []bool
	var codes []wire.ErrorCode
	for _, m := range c.replies(cl.id) {
		if m.SessionAck != nil {
			require.Equal(t, uint64(1), m.SessionAck.Session)
			acks = append(acks, m.SessionAck.LeaseOK)
		}
		if m.Error != nil {
			codes = append(codes, m.Error.Code)
		}
	}
	require.Equal(t, []bool{false, false}, acks, "a heartbeat and a SessionOpen of the reset session: not ok")
	require.Contains(t, codes, wire.ErrCodeSuspected, "its statement is refused")
	require.Nil(t, k.Register("L", cl.id), "nothing of session 1 comes back, by the client or by forward")
	require.False(t, k.mute.LeaseOK(cl.id, 1, at), "and no lease starts on it")

	// Session 2: a whole TTL from the restart, then its vote; session 1: none.
	require.Empty(t, restartTick(c, s, restarted.Add(ttl1)), "no vote on the reset session, whose TTL has passed")
	require.Empty(t, restartTick(c, s, restarted.Add(ttl2-time.Millisecond)), "no vote within session 2's TTL of the restart")
	votes := restartTick(c, s, restarted.Add(ttl2))
	require.Len(t, votes, 1, "session 2's fresh lease ran out")
	require.Equal(t, uint64(2), votes[0].Session)
	require.Empty(t, restartTick(c, s, restarted.Add(10*ttl2)), "and never one on the reset session")
	require.Equal(t, uint64(1), k.Stats.VotesCast)
	require.Equal(t, []uint64{2}, k.mute.SessionTTLs(cl.id), "only the live session's TTL was restored")
	require.NotContains(t, disk[bucketTTL], string(voteKey(cl.id, 1)), "the stale record was collected at the first tick")
}

// docs/protocol.md change 33 (§3.5, §5): probation is not on disk; "a
// restarted server puts every client it holds a certificate (or settled
// record) of on probation, which only refuses forwards of sessions no one
// spoke in here". Before the restart this client was not on probation (it
// spoke here in the session the certificate reset: TestNoProbationAfterA-
// SessionHeardDirectly); after it, a forward of a newer session is refused,
// and the forwarder is shown why — the certificate, or, once compacted
// (change 26), this server's vote on the settled session. An Exit is still
// taken; a session the client opens here itself is taken by forward again.
func TestRestartPutsResetClientsOnProbation(t *testing.T) {
	for _, compacted := range []bool{false, true} {
		name := "certificate"
		if compacted {
			name = "settled record"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 4, 1)
			cl := c.newClient()
			const lock = "L"
			k := c.cores[0]
			c.doorway(cl, lock, 1, 1) // it spoke in session 1 at every server
			c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, k.q)})
			c.drop()
			require.NotContains(t, k.stalled, cl.id, "it spoke here in the reset session: not on probation")
			if compacted {
				c.tick(0)
				c.tick(k.mute.Retention())
				require.Contains(t, c.disks[0][bucketSettled], string(cl.id[:]))
				require.NotContains(t, c.disks[0][bucketCert], string(cl.id[:]))
			}
			c.drop()

			c.restart(0)
			k = c.cores[0]
			require.False(t, c.forwardHeld(cl, lock, cl.stmt(lock, 2, 1, wire.PhaseDoorway, 0, nil)),
				"after the restart a forward of a session it never spoke in here is refused")
			require.Equal(t, uint64(1), k.Stats.ForwardsRefused)
			require.Len(t, c.inflight, 1, "the forwarder is shown why: %v", c.inflightKinds())
			require.Equal(t, wire.ServerID(1), c.inflight[0].to)
			shown, err := wire.Decode(c.inflight[0].data)
			require.NoError(t, err)
			if compacted {
				require.NotNil(t, shown.Suspect, "its own vote on the settled session: %s", shown)
				body, err := shown.Suspect.Verify(c.keys)
				require.NoError(t, err)
				require.Equal(t, cl.id, body.Client)
				require.Equal(t, uint64(1), body.Session)
				require.Equal(t, wire.ServerID(0), body.Server)
			} else {
				require.NotNil(t, shown.Reset, "the certificate: %s", shown)
				require.Equal(t, cl.id, shown.Reset.Client)
			}
			c.drop()

			require.True(t, c.forwardHeld(cl, lock, cl.stmt(lock, 2, 1, wire.PhaseExit, 0, nil)), "an Exit is always taken")
			c.drop()
			c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 3, TTLMillis: 5000}})
			c.replies(cl.id)
			require.True(t, c.forwardHeld(cl, lock, cl.stmt(lock, 3, 1, wire.PhaseDoorway, 0, nil)),
				"a session the client opened here itself is taken by forward")
		})
	}
}

// docs/protocol.md change 33: who spoke in which session is on disk, so
// "probation never drops what this server acknowledged to the client
// itself, also after a restart". The client spoke here in session 2 (its
// Doorway acknowledged) after a certificate reset its session 1: the
// restarted server puts it on probation above 1, yet keeps the reloaded
// Doorway of session 2 and takes session 2's statements by forward; only a
// session it never spoke in here (3) is refused.
// (TestProbationKeepsWhatTheClientSentDirectlyAcrossARestart pins the other
// order: the certificate arriving after the restart.)
func TestRestartProbationKeepsWhatTheClientSpokeIn(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	const lock = "L"
	k := c.cores[0]
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, k.q)})
	c.drop()
	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 2, TTLMillis: 5000}})
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: cl.stmt(lock, 2, 1, wire.PhaseDoorway, 0, nil)}})
	rs := c.replies(cl.id)
	require.Len(t, rs, 2)
	require.NotNil(t, rs[1].ViewReply, "its Doorway is acknowledged: %s", rs[1])
	c.drop()

	c.restart(0)
	k = c.cores[0]
	require.Contains(t, k.stalled, cl.id, "on probation after the restart")
	require.True(t, isMember(k, lock, cl.id), "the Doorway it acknowledged to the client is reloaded")
	c.tick(time.Millisecond)
	c.drop()
	require.True(t, isMember(k, lock, cl.id), "and kept")
	require.True(t, c.forwardHeld(cl, lock, cl.stmt(lock, 2, 2, wire.PhaseDoorway, 0, nil)),
		"a statement of the session it spoke in here is taken by forward")
	require.Zero(t, k.Stats.ForwardsRefused)
	c.drop()
	require.False(t, c.forwardHeld(cl, lock, cl.stmt(lock, 3, 1, wire.PhaseDoorway, 0, nil)),
		"one of a session it never spoke in here is not")
	require.Equal(t, uint64(1), k.Stats.ForwardsRefused)
}
