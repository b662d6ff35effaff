package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// job is one run of `bqclient lock NAME -- CMD` as a CI system makes it: a
// new session, the lock's Doorway and Exit at every server, the session
// closed and reset by a certificate. It returns the error codes the
// servers answered.
func (c *cluster) job(cl *client, name string, sess uint64) []wire.ErrorCode {
	var codes []wire.ErrorCode
	for s := range c.cores {
		c.fromClient(s, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: sess, TTLMillis: 5000}})
		for _, ph := range []wire.Phase{wire.PhaseDoorway, wire.PhaseExit} {
			c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: sess, Statement: cl.stmt(name, sess, sess, ph, 0, nil)}})
		}
		codes = append(codes, errorCodes(c.replies(cl.id))...)
	}
	cert := c.certify(cl.id, sess, c.cores[0].q)
	for s := range c.cores {
		c.fromServer(s, wire.ServerID((s+1)%len(c.cores)), &wire.Message{Reset: cert})
	}
	c.drop()
	return codes
}

// The per-identity bound on locks counts what is in use now, not every
// name ever used (change 22): a CI system that locks one new name per job
// is never shut out, and a server keeps nothing of a finished job but the
// certificate of its identity (issue: after 1024 names every new one
// timed out, for good).
func TestLockLimitCountsWhatIsLive(t *testing.T) {
	c := newCluster(t, 4, 1)
	for _, k := range c.cores {
		k.cfg.MaxLocksPerClient = 3
	}
	cl := c.newClient()
	for job := uint64(1); job <= 10; job++ {
		require.Empty(t, c.job(cl, fmt.Sprintf("ci/job-%d", job), job), "job %d", job)
	}
	for s, k := range c.cores {
		require.Zero(t, k.ClientFootprint(cl.id).Locks, "server %d", s)
		require.Zero(t, k.LockCount(), "server %d keeps no lock that never had a Ticket", s)
		require.Empty(t, c.disks[s][bucketStmt], "server %d", s)
		require.Len(t, c.disks[s][bucketCert], 1, "server %d keeps the identity's newest certificate", s)
	}
}

// Within one session the bound holds, with a refusal that names it; the
// names count again as soon as the session ends.
func TestLockLimitRefusesClearlyWithinASession(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	k.cfg.MaxLocksPerClient = 3
	cl := c.newClient()
	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	for i := range 3 {
		c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: cl.stmt(fmt.Sprint("L", i), 1, uint64(i+1), wire.PhaseDoorway, 0, nil)}})
	}
	require.Empty(t, errorCodes(c.replies(cl.id)))
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 9, Statement: cl.stmt("L3", 1, 4, wire.PhaseDoorway, 0, nil)}})
	got := c.replies(cl.id)
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeLimit}, errorCodes(got))
	require.Contains(t, got[0].Error.Detail, "limit max_locks_per_client (3) reached")
	require.Equal(t, &wire.Limit{Name: "max_locks_per_client", Value: 3}, got[0].Error.Limit)
	require.Equal(t, uint64(1), k.Stats.Limited["max_locks_per_client"])
	require.Nil(t, k.Register("L3", cl.id))

	c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, k.q)})
	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 2, TTLMillis: 5000}})
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 10, Statement: cl.stmt("L3", 2, 5, wire.PhaseDoorway, 0, nil)}})
	require.Empty(t, errorCodes(c.replies(cl.id)))
}

// A certificate collects the values of the sessions it ends, and only
// those: a value of a newer, live session of the same client stays, and so
// does the hw of a lock (fencing tokens stay monotone, §7).
func TestResetCollectsOnlyTheSessionsItEnds(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	cl := c.newClient()
	j := c.doorway(cl, "A", 1, 1)
	tk := cl.stmt("A", 1, 1, wire.PhaseTicket, 1, j)
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: cl.stmt("A", 1, 1, wire.PhaseExit, 0, nil)}})
	c.doorway(cl, "B", 2, 2) // session 2 lives on
	c.replies(cl.id)

	c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, k.q)})
	require.Nil(t, k.Register("A", cl.id), "session 1's value is collected")
	require.NotNil(t, k.Register("B", cl.id), "session 2's value stays")
	require.True(t, isMember(k, "B", cl.id))
	require.Equal(t, 1, k.ClientFootprint(cl.id).Locks)
	require.Equal(t, 2, k.LockCount(), "A stays for its hw")
	require.Equal(t, uint64(1), k.locks["A"].HW().St.N)
	require.Contains(t, c.disks[0][bucketHW], "A")
	require.NotContains(t, c.disks[0][bucketStmt], string(stmtKey("A", cl.id)))
	require.Contains(t, c.disks[0][bucketStmt], string(stmtKey("B", cl.id)))
	require.Empty(t, c.disks[0][bucketJust], "J goes with its Ticket's session")

	// A Read of the collected value is answered with the certificate.
	c.fromClient(0, cl.id, &wire.Message{Read: &wire.Read{Req: 4, Lock: "A", Client: cl.id}})
	got := c.replies(cl.id)
	require.Len(t, got, 1)
	require.Nil(t, got[0].ReadReply.Statement)
	require.NotNil(t, got[0].ReadReply.Reset)
	require.Equal(t, uint64(1), got[0].ReadReply.Reset.Session)
}

// A member that a reset removes is pushed to its listeners with the
// certificate and leaves their Watch (the reset settles it, change 15).
func TestResetTellsListenersAndSettles(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	x, me := c.newClient(), c.newClient()
	c.doorway(x, "L", 1, 1)
	j := c.doorway(me, "L", 1, 1)
	tk := me.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	c.fromClient(0, me.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	c.fromClient(0, me.id, &wire.Message{Listen: &wire.Listen{Req: 3, Lock: "L", Session: 1, Attempt: 1, Members: []wire.ClientID{x.id}}})
	c.replies(me.id)
	_, watched := k.locks["L"].SubscriptionsOf(me.id)
	require.Equal(t, 1, watched)

	c.fromServer(0, 1, &wire.Message{Reset: c.certify(x.id, 1, k.q)})
	got := c.replies(me.id)
	require.Len(t, got, 1)
	u := got[0].Update
	require.NotNil(t, u)
	require.Equal(t, []wire.ClientID{x.id}, u.Absent)
	require.Len(t, u.Resets, 1, "the certificate comes with the absence")
	_, watched = k.locks["L"].SubscriptionsOf(me.id)
	require.Zero(t, watched, "x is settled for the listener")
}

// A peer that missed a certificate (an overflowing queue) still gets it at
// the next resync, though the server that sends it collected the values.
func TestResyncSendsCertificatesOfCollectedClients(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	c.doorway(cl, "L", 1, 1)
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, c.cores[0].q)})
	c.drop() // server 3 never hears of it
	require.Zero(t, c.cores[0].ClientFootprint(cl.id).Locks)
	require.NotNil(t, c.cores[3].Register("L", cl.id))

	c.now = c.now.Add(time.Millisecond)
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ServerPeer(3)}))
	c.flush()
	require.Nil(t, c.cores[3].Register("L", cl.id), "server 3 got the certificate and collected too")
	require.Equal(t, uint64(1), c.cores[3].ResetUpTo(cl.id))
}

// A disk written before collection existed (or a crash between a
// certificate and a later deletion) holds values, votes and TTLs of reset
// sessions: a restart does not load them and deletes them at its first
// Tick.
func TestRestartCollectsWhatACertificateEnded(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	c.doorway(cl, "L", 1, 1)
	k := c.cores[0]
	vote, err := wire.SignSuspect(c.signers[0], c.keys.Cluster, &wire.SuspectBody{Client: cl.id, Session: 1, Server: 0, Reason: wire.SuspectMute})
	require.NoError(t, err)
	disk := c.disks[0]
	disk[bucketVote] = map[string][]byte{string(voteKey(cl.id, 1)): mustMarshal(&vote)}
	cert, err := crypto.Marshal(c.certify(cl.id, 1, k.q))
	require.NoError(t, err)
	disk[bucketCert] = map[string][]byte{string(cl.id[:]): cert}
	require.NotEmpty(t, disk[bucketStmt])
	require.NotEmpty(t, disk[bucketTTL])

	c.restart(0)
	require.Nil(t, c.cores[0].Register("L", cl.id))
	require.Zero(t, c.cores[0].ClientFootprint(cl.id).Locks)
	c.tick(time.Millisecond)
	for _, b := range []string{bucketStmt, bucketVote, bucketTTL} {
		require.Empty(t, disk[b], b)
	}
	require.Len(t, disk[bucketCert], 1)
}

// A vote this server cast is deleted from its disk with the certificate
// it helped form.
func TestCertificateDeletesOwnVotes(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	c.doorway(cl, "L", 1, 1)
	c.fromClient(0, cl.id, &wire.Message{SessionClose: &wire.SessionClose{Req: 5, Session: 1}})
	c.tick(time.Millisecond) // server 0 votes
	require.Len(t, c.disks[0][bucketVote], 1)
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, c.cores[0].q)})
	require.Empty(t, c.disks[0][bucketVote])
}

// Names whose subscriptions ended leave the count: at once when the
// client's connection closes, and when the bound is reached for those that
// ran out of pushes (T) meanwhile.
func TestLockLimitForgetsEndedSubscriptions(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	k.cfg.MaxLocksPerClient, k.cfg.MaxPushes = 3, 1
	reader, writer := c.newClient(), c.newClient()
	getSet := func(name string) []wire.ErrorCode {
		c.fromClient(0, reader.id, &wire.Message{GetSet: &wire.GetSet{Req: 1, Lock: name}})
		return errorCodes(c.replies(reader.id))
	}
	c.fromClient(0, writer.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	for i := range 3 {
		name := fmt.Sprint("L", i)
		require.Empty(t, getSet(name))
		// The writer's Doorway is the one push the subscription had.
		c.fromClient(0, writer.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: writer.stmt(name, 1, uint64(i+1), wire.PhaseDoorway, 0, nil)}})
	}
	require.Equal(t, 3, k.ClientFootprint(reader.id).Locks, "ended subscriptions are counted until the bound")
	require.Empty(t, getSet("L3"), "at the bound, the names it no longer uses are released")
	require.Equal(t, 1, k.ClientFootprint(reader.id).Locks)

	c.now = c.now.Add(time.Millisecond)
	c.effects(0, k.Step(c.now, Input{Kind: InputDisconnected, From: wire.ClientPeer(reader.id)}))
	require.Zero(t, k.ClientFootprint(reader.id).Locks, "a closed connection releases its subscriptions' locks")
	require.Equal(t, 3, k.LockCount(), "L3 is gone; the writer's Doorways keep L0–L2")
}

// A server that voted and missed the certificate gets it back by sending
// its vote again: the peers that formed the certificate collected the
// client's values and restarted since, so no resync of theirs carries it
// (campaign seed 1271).
func TestPendingVoteIsResentUntilTheCertificateComes(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	c.doorway(cl, "L", 1, 1)
	c.fromClient(0, cl.id, &wire.Message{SessionClose: &wire.SessionClose{Req: 5, Session: 1}})
	c.tick(time.Millisecond) // server 0 votes
	c.drop()                 // and its vote, and everything after, is lost
	cert := c.certify(cl.id, 1, c.cores[0].q)
	for s := 1; s < 4; s++ {
		c.fromServer(s, 2, &wire.Message{Reset: cert})
		c.restart(s)
	}
	c.drop()
	require.NotNil(t, c.cores[0].Register("L", cl.id))
	c.tick(c.cores[0].cfg.DefaultTTL)
	c.flush()
	require.Equal(t, uint64(1), c.cores[0].ResetUpTo(cl.id))
	require.Nil(t, c.cores[0].Register("L", cl.id))
}
