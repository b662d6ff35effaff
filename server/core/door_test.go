package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// A connection may outlive its admission certificate (change 23): from the
// last millisecond of its window on, every request of the client is refused
// with NotAllowed — a heartbeat included, so its lease is not renewed — and
// the next Tick names it, once, for the runtime to close its connection.
// Its observer connections go with it. Up to the window's end it is served.
func TestCertificateExpiresWhileConnected(t *testing.T) {
	c := newClosedCluster(t, 4, 1)
	cl := c.newClient()
	notAfter := c.now.Add(time.Second)
	grant := &wire.AdmissionBody{Name: "ci", Client: cl.id, NotBefore: c.now.Add(-time.Hour).UnixMilli(), NotAfter: notAfter.UnixMilli()}
	c.connect(cl, grant)
	obs := wire.ObserverID(cl.id, []byte("n"))
	c.connectObserver(cl, obs, grant)
	k := c.cores[0]

	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	rs := c.replies(cl.id)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].SessionAck, "%s", rs[0])
	e := k.Tick(notAfter.Add(-time.Millisecond))
	require.Empty(t, e.Expired, "still valid")

	c.now = notAfter.Add(-2 * time.Millisecond) // fromClient adds 1 ms: the last valid instant
	c.fromClient(0, cl.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 1}})
	rs = c.replies(cl.id)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].SessionAck, "served up to the end of its window: %s", rs[0])

	c.fromClient(0, cl.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 2}})
	rs = c.replies(cl.id)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Error, "at NotAfter the heartbeat is refused: %s", rs[0])
	require.Equal(t, wire.ErrCodeNotAllowed, rs[0].Error.Code)
	require.Contains(t, rs[0].Error.Detail, "expired")
	c.fromClient(0, obs, &wire.Message{Status: &wire.Status{Req: 3}})
	rs = c.replies(obs)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Error, "its observer too: %s", rs[0])

	e = k.Tick(c.now)
	require.ElementsMatch(t, []wire.ClientID{cl.id, obs}, e.Expired)
	e = k.Tick(c.now.Add(time.Second))
	require.Empty(t, e.Expired, "named once per connection")
}

// A lock name outside the certificate's patterns is refused by every
// correct server, not only by one (change 23): an outsider to a name gets
// no View anywhere, so never the q a Ticket needs.
func TestEveryServerRefusesNamesOutsideTheCertificate(t *testing.T) {
	c := newClosedCluster(t, 4, 1)
	cl := c.newClient()
	c.connect(cl, &wire.AdmissionBody{Name: "ci", Client: cl.id, Locks: []string{"ci/*"}})
	for s := range c.cores {
		c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: cl.stmt("prod/db", 1, 1, wire.PhaseDoorway, 0, nil)}})
		rs := c.replies(cl.id)
		require.Len(t, rs, 1)
		require.NotNil(t, rs[0].Error, "s%d: %s", s, rs[0])
		require.Equal(t, wire.ErrCodeForbidden, rs[0].Error.Code, "s%d", s)
		c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: cl.stmt("ci/db", 1, 1, wire.PhaseDoorway, 0, nil)}})
		rs = c.replies(cl.id)
		require.Len(t, rs, 1)
		require.NotNil(t, rs[0].ViewReply, "s%d: a name inside the patterns is served: %s", s, rs[0])
	}
}
