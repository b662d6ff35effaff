package core

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// Probation (docs/protocol.md change 33), at one correct server.

// forward hands st to server 0 as server 1's Forward and reports whether
// server 0 now holds it.
func (c *cluster) forwardHeld(cl *client, lock string, st wire.SignedStatement) bool {
	c.fromServer(0, 1, &wire.Message{Forward: &wire.Forward{Statement: st}})
	en := c.cores[0].locks[lock]
	if en == nil {
		return false
	}
	h := en.Highest(cl.id)
	return h != nil && string(h.Signed.Signed.Body) == string(st.Signed.Body)
}

// A client whose session this server knew only from a forward, and which a
// certificate then reset, is on probation: a forwarded statement of a newer
// session it never opened here is refused; an Exit is still taken; a
// session the client opens here itself is taken by forward too.
func TestProbationAfterAForwardOnlySessionWasReset(t *testing.T) {
	c := newCluster(t, 4, 1)
	m := c.newClient()
	const lock = "L"
	require.True(t, c.forwardHeld(m, lock, m.stmt(lock, 1, 1, wire.PhaseDoorway, 0, nil)), "before probation a forwarded session is taken")
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(m.id, 1, c.cores[0].q)})
	require.False(t, isMember(c.cores[0], lock, m.id))

	require.False(t, c.forwardHeld(m, lock, m.stmt(lock, 2, 1, wire.PhaseDoorway, 0, nil)), "on probation: session 2 only by forward")
	require.Equal(t, uint64(1), c.cores[0].Stats.ForwardsRefused)
	c.drop() // (the certificate shown to the forwarder)
	c.drop()
	c.fromServer(0, 1, &wire.Message{Announce: &wire.Announce{Items: []wire.StatementRef{{Lock: lock, Client: m.id, Session: 3, Attempt: 1, Phase: wire.PhaseDoorway}}}})
	require.Len(t, c.inflight, 1, "no pull of what would be refused; the announcer is shown why instead")
	shown, err := wire.Decode(c.inflight[0].data)
	require.NoError(t, err)
	require.Equal(t, wire.ServerID(1), c.inflight[0].to)
	require.NotNil(t, shown.Reset, "the certificate that put m on probation: %s", shown)
	require.Equal(t, m.id, shown.Reset.Client)

	require.True(t, c.forwardHeld(m, lock, m.stmt(lock, 3, 1, wire.PhaseExit, 0, nil)), "an Exit is taken by forward even on probation: it only removes")

	c.fromClient(0, m.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 4, TTLMillis: 5000}})
	c.replies(m.id)
	require.True(t, c.forwardHeld(m, lock, m.stmt(lock, 4, 1, wire.PhaseDoorway, 0, nil)), "a session the client opened here is taken by forward")
	require.True(t, c.forwardHeld(m, lock, m.stmt(lock, 4, 1, wire.PhaseExit, 0, nil)), "an Exit is always taken")
}

// A server that took a session of a client alone — it was down when the
// client's earlier sessions were reset, so it is not on probation — drops it
// when another server shows it the certificate that put the client on
// probation there; otherwise no certificate could ever end it.
func TestProbationDropsWhatWasTakenAlone(t *testing.T) {
	c := newCluster(t, 4, 1)
	m := c.newClient()
	const lock = "L"
	require.True(t, c.forwardHeld(m, lock, m.stmt(lock, 3, 1, wire.PhaseDoorway, 0, nil)), "not on probation yet: taken")
	require.True(t, isMember(c.cores[0], lock, m.id))
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(m.id, 2, c.cores[0].q)})
	require.False(t, isMember(c.cores[0], lock, m.id), "session 3, which m never spoke in here, is dropped with probation")
	require.Nil(t, c.cores[0].locks[lock], "and nothing of m is kept")
}

// A reset of a session the client spoke in here puts nobody on probation:
// a correct client that crashed is not held to its next session's
// forwards; and a client's own statements are never refused.
func TestNoProbationAfterASessionHeardDirectly(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	const lock = "L"
	c.doorway(cl, lock, 1, 1) // opened and sent at every server
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, c.cores[0].q)})
	require.True(t, c.forwardHeld(cl, lock, cl.stmt(lock, 2, 1, wire.PhaseDoorway, 0, nil)), "not on probation")
	require.Zero(t, c.cores[0].Stats.ForwardsRefused)

	// Known first from a forward, then opened by the client itself: heard.
	late := c.newClient()
	require.True(t, c.forwardHeld(late, lock, late.stmt(lock, 1, 1, wire.PhaseDoorway, 0, nil)))
	c.fromClient(0, late.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	c.replies(late.id)
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(late.id, 1, c.cores[0].q)})
	require.True(t, c.forwardHeld(late, lock, late.stmt(lock, 2, 1, wire.PhaseDoorway, 0, nil)), "not on probation once it spoke here")

	m := c.newClient()
	require.True(t, c.forwardHeld(m, lock, m.stmt(lock, 1, 1, wire.PhaseDoorway, 0, nil)))
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(m.id, 1, c.cores[0].q)})
	c.fromClient(0, m.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: m.stmt(lock, 2, 1, wire.PhaseDoorway, 0, nil)}})
	rs := c.replies(m.id)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].ViewReply, "its own Submit is served: %s", rs[0])
}

// Probation never drops what this server acknowledged to the client itself,
// also after a restart: who spoke in which session is on disk. Here c1
// spoke in session 2 here (its Doorway acknowledged), the server restarts,
// and a certificate of c1's session 1 — which c1 never used here — arrives.
func TestProbationKeepsWhatTheClientSentDirectlyAcrossARestart(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	const lock = "L"
	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 2, TTLMillis: 5000}})
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: cl.stmt(lock, 2, 1, wire.PhaseDoorway, 0, nil)}})
	c.replies(cl.id)
	require.True(t, isMember(c.cores[0], lock, cl.id))
	c.restart(0)
	require.True(t, isMember(c.cores[0], lock, cl.id))
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, c.cores[0].q)})
	require.True(t, isMember(c.cores[0], lock, cl.id), "the Doorway c1 sent here itself is kept")
}
