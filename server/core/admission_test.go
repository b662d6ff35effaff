package core

import (
	"crypto/rand"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// newClosedCluster is a cluster with a client CA (docs/protocol.md change 23).
func newClosedCluster(t *testing.T, n, f int) *cluster {
	ca, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	c := newCluster(t, n, f)
	c.clientCA = ca
	for i := range c.cores {
		c.cores[i] = c.newCore(i, n, f)
	}
	return c
}

// connect delivers cl's connection to every server with what its
// certificate grants (a grant without a window gets one that covers the
// test, as a real certificate always has one).
func (c *cluster) connect(cl *client, grant *wire.AdmissionBody) {
	grant = windowed(grant)
	for s := range c.cores {
		c.effects(s, c.cores[s].Step(c.now, Input{Kind: InputConnected, From: wire.ClientPeer(cl.id), Admission: grant}))
	}
}

func windowed(g *wire.AdmissionBody) *wire.AdmissionBody {
	if g == nil || g.NotAfter != 0 {
		return g
	}
	w := *g
	w.NotAfter = math.MaxInt64
	return &w
}

func (c *cluster) revocation(cl *client, by *crypto.PrivateKey) crypto.Signed {
	r, err := wire.SignRevocation(by, c.keys.Cluster, &wire.RevocationBody{Client: cl.id, Name: "victim", At: 1})
	require.NoError(c.t, err)
	return r
}

// Every request on a lock name outside the connection's certificate is
// refused with Forbidden, and one on a name inside it is served.
func TestPermissionsRefuseNamesOutsideTheCertificate(t *testing.T) {
	c := newClosedCluster(t, 4, 1)
	cl := c.newClient()
	c.connect(cl, &wire.AdmissionBody{Name: "ci", Client: cl.id, Locks: []string{"ci/*"}})

	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	c.replies(cl.id)
	for _, m := range []*wire.Message{
		{Submit: &wire.Submit{Req: 1, Statement: cl.stmt("prod/db", 1, 1, wire.PhaseDoorway, 0, nil)}},
		{Listen: &wire.Listen{Req: 2, Lock: "prod/db", Session: 1, Attempt: 1}},
		{GetSet: &wire.GetSet{Req: 3, Lock: "prod/db"}},
		{Read: &wire.Read{Req: 4, Lock: "prod/db", Client: cl.id}},
		{Status: &wire.Status{Req: 5, Lock: "prod/db"}},
		{Submit: &wire.Submit{Req: 6, Statement: cl.stmt("ci/a/b", 1, 1, wire.PhaseDoorway, 0, nil)}}, // '*' stops at '/'
	} {
		c.fromClient(0, cl.id, m)
		rs := c.replies(cl.id)
		require.Len(t, rs, 1, "%s", m)
		require.NotNil(t, rs[0].Error, "%s: %s", m, rs[0])
		require.Equal(t, wire.ErrCodeForbidden, rs[0].Error.Code, "%s", m)
		require.Contains(t, rs[0].Error.Detail, `"ci" may not use lock`)
		require.Contains(t, rs[0].Error.Detail, "ci/*")
	}
	require.Nil(t, c.cores[0].locks["prod/db"], "a refused name creates no lock")

	// An Exit only removes: the attempt refused for its name ends cleanly.
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 9, Statement: cl.stmt("prod/db", 1, 1, wire.PhaseExit, 0, nil)}})
	rs := c.replies(cl.id)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Ack, "%s", rs[0])

	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 7, Statement: cl.stmt("ci/1", 1, 2, wire.PhaseDoorway, 0, nil)}})
	rs = c.replies(cl.id)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].ViewReply, "%s", rs[0])

	// The list of all locks shows only the names the certificate allows.
	other := c.newClient()
	c.connect(other, &wire.AdmissionBody{Name: "ops", Client: other.id})
	c.fromClient(0, other.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	c.fromClient(0, other.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: other.stmt("prod/db", 1, 1, wire.PhaseDoorway, 0, nil)}})
	c.replies(other.id)
	names := func(id wire.ClientID) []string {
		c.fromClient(0, id, &wire.Message{Status: &wire.Status{Req: 10}})
		rs := c.replies(id)
		require.Len(t, rs, 1)
		var out []string
		for _, l := range rs[0].StatusReply.Locks {
			out = append(out, l.Name)
		}
		return out
	}
	require.Equal(t, []string{"ci/1"}, names(cl.id))
	require.Equal(t, []string{"ci/1", "prod/db"}, names(other.id))

	// After the connection ends, nothing is served without a certificate,
	// and a new connection with a wider certificate is served.
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputDisconnected, From: wire.ClientPeer(cl.id)}))
	require.NotContains(t, c.cores[0].grants, cl.id)
	c.fromClient(0, cl.id, &wire.Message{GetSet: &wire.GetSet{Req: 8, Lock: "ci/1"}})
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeForbidden}, errorCodes(c.replies(cl.id)))
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ClientPeer(cl.id), Admission: windowed(&wire.AdmissionBody{Name: "ci", Client: cl.id})}))
	c.fromClient(0, cl.id, &wire.Message{GetSet: &wire.GetSet{Req: 8, Lock: "prod/db"}})
	rs = c.replies(cl.id)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Update)
}

// A revocation is persisted and passed on; from then on the client's
// requests are refused and its leases are not renewed, and its session
// ends by the ordinary certificate once the leases run out — not before.
func TestRevocationEndsSessionsByCertificate(t *testing.T) {
	c := newClosedCluster(t, 4, 1)
	cl := c.newClient()
	c.connect(cl, &wire.AdmissionBody{Name: "victim", Client: cl.id})
	c.doorway(cl, "L", 1, 1) // SessionOpen (TTL 5 s) and a Doorway at every server
	require.True(t, isMember(c.cores[3], "L", cl.id))
	opened := c.now

	op := c.newClient()
	c.fromClient(0, op.id, &wire.Message{Revoke: &wire.Revoke{Req: 9, Revocation: c.revocation(cl, c.clientCA)}})
	rs := c.replies(op.id)
	require.Len(t, rs, 1)
	require.Equal(t, &wire.Ack{Req: 9}, rs[0].Ack)
	c.flush() // passed on to every other server
	for s, k := range c.cores {
		require.Equal(t, []wire.ClientID{cl.id}, k.Revoked(), "server %d", s)
		require.Contains(t, c.disks[s][bucketRevoked], string(cl.id[:]), "server %d persisted it", s)
	}

	for s := range c.cores {
		c.fromClient(s, cl.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 1}})
		c.fromClient(s, cl.id, &wire.Message{GetSet: &wire.GetSet{Req: 2, Lock: "L"}})
	}
	for _, m := range c.replies(cl.id) {
		switch {
		case m.SessionAck != nil:
			require.False(t, m.SessionAck.LeaseOK, "a revoked client's lease is not renewed")
		case m.Error != nil:
			require.Equal(t, wire.ErrCodeNotAllowed, m.Error.Code)
		default:
			t.Fatalf("unexpected reply %s", m)
		}
	}

	// No vote while the leases the client was granted live.
	tickAll := func(at time.Time) {
		c.now = at
		for s := range c.cores {
			c.effects(s, c.cores[s].Tick(at))
		}
		c.flush()
	}
	tickAll(opened.Add(4 * time.Second))
	require.True(t, isMember(c.cores[0], "L", cl.id))
	tickAll(opened.Add(6 * time.Second))
	for s, k := range c.cores {
		require.False(t, isMember(k, "L", cl.id), "server %d: reset by certificate", s)
		require.NotNil(t, k.mute.Certificate(cl.id), "server %d", s)
	}

	// A restarted server still refuses the client, and hands the
	// revocation to a peer that reconnects.
	c.restart(2)
	require.Equal(t, []wire.ClientID{cl.id}, c.cores[2].Revoked())
	e := c.cores[2].Step(c.now, Input{Kind: InputConnected, From: wire.ServerPeer(1)})
	found := false
	for _, o := range e.Send {
		found = found || o.Msg.Revoke != nil
	}
	require.True(t, found, "resync sends the revocations")
}

// Only the client CA can revoke: a faulty server's or client's forgery
// changes nothing and is not kept.
func TestForgedRevocationIsRefused(t *testing.T) {
	c := newClosedCluster(t, 4, 1)
	cl := c.newClient()
	mallory := c.newClient()
	forged := c.revocation(cl, mallory.key)
	c.fromClient(0, mallory.id, &wire.Message{Revoke: &wire.Revoke{Req: 1, Revocation: forged}})
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeRejected}, errorCodes(c.replies(mallory.id)))
	c.fromServer(1, 3, &wire.Message{Revoke: &wire.Revoke{Revocation: forged}})
	for s, k := range c.cores {
		require.Empty(t, k.Revoked(), "server %d", s)
		require.Empty(t, c.disks[s][bucketRevoked], "server %d", s)
	}
	require.Empty(t, c.inflight, "nothing passed on")
}

// docs/protocol.md change 52: a retired client CA revokes nothing. Epoch 1
// lists a second client CA beside the first, epoch 2 retires the first;
// a server that holds epoch 2 refuses a revocation the first signed, live
// or from a peer, and takes one the CA in force signed. One the first
// signed while it was in force, on this server's disk, is kept through a
// restart.
func TestARetiredClientCARevokesNothing(t *testing.T) {
	c := newClosedCluster(t, 4, 1)
	ca := c.withCA()
	old := c.clientCA
	renewed, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	op := c.newClient()
	c.connect(op, windowed(&wire.AdmissionBody{Name: "operator", Client: op.id, Locks: []string{".bq-operator"}}))
	early, late, victim := c.newClient(), c.newClient(), c.newClient()

	c.fromClient(0, op.id, &wire.Message{Revoke: &wire.Revoke{Req: 1, Revocation: c.revocation(early, old)}})
	require.Empty(t, errorCodes(c.replies(op.id)), "in force: taken")

	one := c.clientCAEpoch(ca, 1, [32]byte(c.keys.Cluster), old, renewed)
	two := c.clientCAEpoch(ca, 2, wire.EpochHash(one.Signed), renewed)
	for s := range 4 {
		c.fromServer(s, wire.ServerID((s+1)%4), &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one, two})})
	}
	for range 10 { // each seals and copies from the others, epoch by epoch
		c.flush()
		c.tick(time.Second)
	}
	c.flush()
	serves, _ := c.cores[0].Epoch()
	require.EqualValues(t, 2, serves)
	c.replies(op.id)

	c.fromClient(0, op.id, &wire.Message{Revoke: &wire.Revoke{Req: 2, Revocation: c.revocation(victim, old)}})
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeRejected}, errorCodes(c.replies(op.id)), "the retired CA's, live")
	c.fromServer(0, 1, &wire.Message{Revoke: &wire.Revoke{Revocation: c.revocation(victim, old)}})
	require.NotContains(t, c.cores[0].Revoked(), victim.id, "nor from a peer")
	c.fromClient(0, op.id, &wire.Message{Revoke: &wire.Revoke{Req: 3, Revocation: c.revocation(late, renewed)}})
	require.Empty(t, errorCodes(c.replies(op.id)), "the CA in force's")
	require.Contains(t, c.cores[0].Revoked(), late.id)

	c.restart(0)
	require.Contains(t, c.cores[0].Revoked(), early.id, "taken while its CA was in force: kept")
	require.Contains(t, c.cores[0].Revoked(), late.id)
	require.NotContains(t, c.cores[0].Revoked(), victim.id)
}

// clientCAEpoch is epoch n of c after the one whose hash is prev: the same
// four members, the client CAs cas, signed by ca and endorsed by servers
// 0–2.
func (c *cluster) clientCAEpoch(ca *crypto.PrivateKey, n uint64, prev [32]byte, cas ...*crypto.PrivateKey) wire.Epoch {
	var members []wire.EpochMember
	for i, key := range c.keys.Servers {
		members = append(members, wire.EpochMember{ID: wire.ServerID(i), Address: "127.0.0.1:7000", Key: key.Wire, Cert: []byte{0x30}})
	}
	b := &wire.EpochBody{Cluster: c.keys.Cluster, Number: n, Prev: prev, Members: members, F: 1}
	for _, k := range cas {
		b.ClientCAs = append(b.ClientCAs, k.Public.Wire)
	}
	s, err := wire.SignEpoch(ca, b)
	require.NoError(c.t, err)
	return c.endorse(s, n, 0, 1, 2)
}
