package core

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// Observer connections (docs/protocol.md change 32).

// connectObserver delivers an observer connection of cl, bound to id, to
// every server, with cl's grant.
func (c *cluster) connectObserver(cl *client, id wire.ClientID, grant *wire.AdmissionBody) {
	grant = windowed(grant)
	for s := range c.cores {
		c.effects(s, c.cores[s].Step(c.now, Input{Kind: InputConnected, From: wire.ClientPeer(id), Admission: grant, Observes: &cl.id}))
	}
}

// An observer only reads: a Status, a GetSet and a Read are served with its
// client's permissions, and everything that writes or opens a session is
// refused with Forbidden, at every correct server.
func TestObserverOnlyReads(t *testing.T) {
	c := newClosedCluster(t, 4, 1)
	cl := c.newClient()
	grant := &wire.AdmissionBody{Name: "ci", Client: cl.id, Locks: []string{"ci/*"}}
	c.connect(cl, grant)
	obs := wire.ObserverID(cl.id, []byte("nonce"))
	c.connectObserver(cl, obs, grant)

	for _, m := range []*wire.Message{
		{Status: &wire.Status{Req: 1, Lock: "ci/a"}},
		{Status: &wire.Status{Req: 2}},
		{GetSet: &wire.GetSet{Req: 3, Lock: "ci/a"}},
		{Read: &wire.Read{Req: 4, Lock: "ci/a", Client: cl.id}},
	} {
		c.fromClient(0, obs, m)
		rs := c.replies(obs)
		require.Len(t, rs, 1, "%s", m)
		require.Nil(t, rs[0].Error, "%s: %s", m, rs[0])
	}
	// Its client's permissions, no wider.
	c.fromClient(0, obs, &wire.Message{Status: &wire.Status{Req: 5, Lock: "prod/db"}})
	rs := c.replies(obs)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Error)
	require.Equal(t, wire.ErrCodeForbidden, rs[0].Error.Code)

	for _, m := range []*wire.Message{
		{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}},
		{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 1}},
		{SessionClose: &wire.SessionClose{Req: 6, Session: 1}},
		{Submit: &wire.Submit{Req: 7, Statement: cl.stmt("ci/a", 1, 1, wire.PhaseDoorway, 0, nil)}},
		{Submit: &wire.Submit{Req: 8, Statement: cl.stmt("ci/a", 1, 1, wire.PhaseExit, 0, nil)}},
		{Listen: &wire.Listen{Req: 9, Lock: "ci/a", Session: 1, Attempt: 1}},
		{Revoke: &wire.Revoke{Req: 10, Revocation: c.revocation(cl, c.clientCA)}},
	} {
		for s := range c.cores {
			c.fromClient(s, obs, m)
			rs := c.replies(obs)
			require.Len(t, rs, 1, "s%d %s", s, m)
			require.NotNil(t, rs[0].Error, "s%d %s: %s", s, m, rs[0])
			require.Equal(t, wire.ErrCodeForbidden, rs[0].Error.Code, "s%d %s", s, m)
			require.Contains(t, rs[0].Error.Detail, "observer connection only reads")
		}
	}
	require.Nil(t, c.cores[0].locks["ci/a"].Highest(obs), "an observer's statement is never kept")
	_, revoked := c.cores[0].revoked[cl.id]
	require.False(t, revoked, "an observer cannot hand over a revocation")
}

// Once its client is revoked, an observer is refused everything, and its
// subscriptions end.
func TestObserverEndsWithItsClientsRevocation(t *testing.T) {
	c := newClosedCluster(t, 4, 1)
	cl := c.newClient()
	grant := &wire.AdmissionBody{Name: "ci", Client: cl.id}
	c.connect(cl, grant)
	obs := wire.ObserverID(cl.id, []byte("nonce"))
	c.connectObserver(cl, obs, grant)
	c.fromClient(0, obs, &wire.Message{GetSet: &wire.GetSet{Req: 1, Lock: "a"}})
	require.Len(t, c.replies(obs), 1)
	require.Equal(t, 1, c.cores[0].locks["a"].Subscribers())

	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputMessage, From: wire.ServerPeer(1), Msg: &wire.Message{Revoke: &wire.Revoke{Revocation: c.revocation(cl, c.clientCA)}}}))
	require.Nil(t, c.cores[0].locks["a"], "the observer's subscription ended with its client")
	c.fromClient(0, obs, &wire.Message{Status: &wire.Status{Req: 2, Lock: "a"}})
	rs := c.replies(obs)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Error)
	require.Contains(t, rs[0].Error.Detail, "revoked")
}

// A holder's new proclamation is pushed to the lock's GetSet subscribers
// (an observer hears the new value at once); a resend of the kept one is
// not (change 32).
func TestProclamationIsPushedToObservers(t *testing.T) {
	c := newCluster(t, 4, 1)
	alice, watcher := c.newClient(), c.newClient()
	const lock = "elect/a"
	c.enterTicket(alice, lock, 1, 1, 1)
	c.submitAll(alice, alice.stmt(lock, 1, 1, wire.PhaseHeld, 1, nil))
	obs := wire.ObserverID(watcher.id, []byte("n"))
	c.connectObserver(watcher, obs, nil)
	c.fromClient(0, obs, &wire.Message{GetSet: &wire.GetSet{Req: 5, Lock: lock}})
	require.Len(t, c.replies(obs), 1, "the snapshot")

	p := alice.proclamation(lock, 1, 1, 1, 1, "10.0.0.1")
	require.Equal(t, wire.ErrorCode(0), c.proclaim(alice, p))
	rs := c.replies(obs)
	require.Len(t, rs, 1, "a push for the new value")
	require.NotNil(t, rs[0].Update)
	require.Equal(t, uint64(5), rs[0].Update.Req)
	require.Equal(t, wire.ErrorCode(0), c.proclaim(alice, p))
	require.Empty(t, c.replies(obs), "a resend changes nothing")
}
