package server

import (
	"crypto/rand"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/certstest"
	"github.com/bq-lock/bq/wire"
)

// The door of a closed cluster (docs/protocol.md change 23), one rule at a
// time: each case is refused with its reason, and the case beside it that
// keeps the rule is welcomed.

// doorFixture is a closed cluster, its client CA, and another closed
// cluster's, with the door of the first.
type doorFixture struct {
	t           *testing.T
	dir         string // ours
	cluster     *certs.Cluster
	ca, otherCA *certs.ClientCA
	door        *admission
	now         time.Time
}

func newDoor(t *testing.T) *doorFixture {
	t.Helper()
	now := time.Now().Truncate(time.Millisecond)
	base := t.TempDir()
	mk := func(name string) *certs.ClientCA {
		dir := filepath.Join(base, name)
		_, err := certs.Init(certs.InitOptions{Dir: dir, Servers: 4, F: -1, Host: "127.0.0.1", PortBase: 7400, Name: name, Closed: true}, now, rand.Reader)
		require.NoError(t, err)
		ca, err := certs.LoadClientCA(dir)
		require.NoError(t, err)
		return ca
	}
	d := &doorFixture{t: t, dir: filepath.Join(base, "ours"), ca: mk("ours"), otherCA: mk("theirs"), now: now}
	d.cluster = d.ca.Cluster
	d.door = newAdmission(d.cluster, nil)
	d.door.now = func() time.Time { return d.now }
	return d
}

func (d *doorFixture) key() *crypto.PrivateKey {
	k, err := crypto.GenerateKey(d.cluster.Scheme, rand.Reader)
	require.NoError(d.t, err)
	return k
}

// cert is a certificate signed by signer for cluster, naming key, valid
// over [from, until).
func (d *doorFixture) cert(signer *crypto.PrivateKey, cluster wire.ClusterID, key *crypto.PrivateKey, from, until time.Time) *crypto.Signed {
	s, err := wire.SignAdmission(signer, cluster, &wire.AdmissionBody{Serial: 1, Name: "ci", Client: wire.ClientID(key.Public.ID),
		NotBefore: from.UnixMilli(), NotAfter: until.UnixMilli()})
	require.NoError(d.t, err)
	return &s
}

// good is a certificate of this cluster's client CA for key, valid for an hour around now.
func (d *doorFixture) good(key *crypto.PrivateKey) *crypto.Signed {
	return d.cert(d.ca.Key, d.cluster.ID(), key, d.now.Add(-time.Hour), d.now.Add(time.Hour))
}

func (d *doorFixture) refused(c wire.ClientID, cert *crypto.Signed, why string) {
	d.t.Helper()
	_, err := d.door.admit(c, cert)
	require.Error(d.t, err, "want refused: %s", why)
	require.Contains(d.t, err.Error(), why)
}

func (d *doorFixture) welcomed(c wire.ClientID, cert *crypto.Signed) {
	d.t.Helper()
	b, err := d.door.admit(c, cert)
	require.NoError(d.t, err)
	require.Equal(d.t, c, b.Client)
}

// The certificate must name the key that proved itself on this connection:
// a certificate is no secret, so anyone who saw one must not connect with
// it and their own key.
func TestDoorCertificateNamesTheProvenKey(t *testing.T) {
	d := newDoor(t)
	alice, mallory := d.key(), d.key()
	d.refused(wire.ClientID(mallory.Public.ID), d.good(alice), "is for client")
	d.welcomed(wire.ClientID(alice.Public.ID), d.good(alice))
}

// The validity window holds at the door: not before NotBefore, not at or
// after NotAfter.
func TestDoorValidityWindow(t *testing.T) {
	d := newDoor(t)
	k := d.key()
	id := wire.ClientID(k.Public.ID)
	from, until := d.now.Add(-time.Hour), d.now.Add(time.Hour)
	cert := d.cert(d.ca.Key, d.cluster.ID(), k, from, until)

	d.now = from.Add(-time.Millisecond)
	d.refused(id, cert, "valid only from")
	d.now = from
	d.welcomed(id, cert)
	d.now = until.Add(-time.Millisecond)
	d.welcomed(id, cert)
	d.now = until
	d.refused(id, cert, "expired")
}

// A revoked client is refused at the door, whatever certificate it shows.
func TestDoorRefusesRevoked(t *testing.T) {
	d := newDoor(t)
	k, other := d.key(), d.key()
	d.door.revoke(wire.ClientID(k.Public.ID))
	d.refused(wire.ClientID(k.Public.ID), d.good(k), "revoked")
	d.welcomed(wire.ClientID(other.Public.ID), d.good(other))
}

// The certificate must be of this cluster's client CA and for this
// cluster: not another cluster's client CA, not one of this cluster's
// other keys (a server's signing key), not this CA's signature over another
// cluster's id; and a closed cluster refuses a key with no certificate.
func TestDoorRefusesOtherCAsAndClusters(t *testing.T) {
	d := newDoor(t)
	k := d.key()
	id := wire.ClientID(k.Public.ID)
	from, until := d.now.Add(-time.Hour), d.now.Add(time.Hour)
	server, err := certs.LoadServer(d.dir, 0)
	require.NoError(t, err)
	d.refused(id, d.cert(d.otherCA.Key, d.otherCA.Cluster.ID(), k, from, until), "not signed by this cluster's client CA")
	d.refused(id, d.cert(server.SigningKey, d.cluster.ID(), k, from, until), "not signed by this cluster's client CA")
	d.refused(id, d.cert(d.otherCA.Key, d.cluster.ID(), k, from, until), "not signed by this cluster's client CA")
	d.refused(id, d.cert(d.key(), d.cluster.ID(), k, from, until), "not signed by this cluster's client CA")
	d.refused(id, d.cert(d.ca.Key, d.otherCA.Cluster.ID(), k, from, until), "cluster")
	d.refused(id, nil, "no admission certificate")
	d.welcomed(id, d.cert(d.ca.Key, d.cluster.ID(), k, from, until))
}

// docs/protocol.md change 52: once the door's client CAs no longer include
// one, every client whose connections it admitted is named, to be thrown
// out (it comes back with a certificate of a CA in force, or not at all),
// and only those: a client admitted by the CA kept, or by both, stays
// until its retired one is named.
func TestDoorNamesTheClientsOfARetiredCA(t *testing.T) {
	d := newDoor(t)
	newer, err := crypto.GenerateKey(d.cluster.Scheme, rand.Reader)
	require.NoError(t, err)
	require.Empty(t, d.door.setCAs([]*crypto.Parsed{d.ca.Key.Public, newer.Public}), "nothing retired")

	oldOnly, renewed, newOnly := d.key(), d.key(), d.key()
	d.welcomed(wire.ClientID(oldOnly.Public.ID), d.good(oldOnly))
	d.welcomed(wire.ClientID(renewed.Public.ID), d.good(renewed))
	d.welcomed(wire.ClientID(renewed.Public.ID), d.cert(newer, d.cluster.ID(), renewed, d.now.Add(-time.Hour), d.now.Add(time.Hour)))
	d.welcomed(wire.ClientID(newOnly.Public.ID), d.cert(newer, d.cluster.ID(), newOnly, d.now.Add(-time.Hour), d.now.Add(time.Hour)))

	gone := d.door.setCAs([]*crypto.Parsed{newer.Public})
	require.ElementsMatch(t, []wire.ClientID{wire.ClientID(oldOnly.Public.ID), wire.ClientID(renewed.Public.ID)}, gone,
		"every client a connection of which the retired CA admitted")
	d.refused(wire.ClientID(oldOnly.Public.ID), d.good(oldOnly), "not signed by")
	d.welcomed(wire.ClientID(renewed.Public.ID), d.cert(newer, d.cluster.ID(), renewed, d.now.Add(-time.Hour), d.now.Add(time.Hour)))
	require.Empty(t, d.door.setCAs([]*crypto.Parsed{newer.Public}), "named once")
}

// docs/protocol.md changes 43 and 52: a running server's door admits by the
// client CAs in force in the newest epoch its core holds, not by every
// client CA the chain ever listed. A client-CA rotation, then the
// retirement of the old CA: the door refuses a certificate of the retired
// CA and welcomes one of the CA in force. Else a retired client CA —
// retired, perhaps, because its key leaked — would go on admitting clients
// at every server, and enroll new identities with whatever locks it names.
func TestTheDoorAdmitsOnlyByTheClientCAsInForce(t *testing.T) {
	now := time.Now().Truncate(time.Millisecond)
	dir := filepath.Join(t.TempDir(), "c")
	_, err := certs.Init(certs.InitOptions{Dir: dir, Servers: 4, F: -1, Host: "127.0.0.1", PortBase: 7400, Name: "c", Closed: true}, now, rand.Reader)
	require.NoError(t, err)
	old, err := certs.LoadClientCA(dir)
	require.NoError(t, err)
	for _, ch := range []certs.Change{{RotateClientCA: true}, {RetireClientCAs: true}} {
		p, err := certs.PlanChange(dir, ch, now, rand.Reader)
		require.NoError(t, err)
		certstest.WriteEndorsed(t, dir, p)
	}
	cur, err := certs.LoadClientCA(dir)
	require.NoError(t, err)
	require.NotEqual(t, old.Key.Public.ID, cur.Key.Public.ID)
	m, err := certs.LoadServer(dir, 0)
	require.NoError(t, err)
	k, err := NewProtocolCore(m, nil)
	require.NoError(t, err)
	s := &Server{Material: m, core: k, admission: newAdmission(m.Cluster, nil), log: slog.New(slog.DiscardHandler)}
	s.admitCAs()

	cert := func(ca *certs.ClientCA, key *crypto.PrivateKey) *crypto.Signed {
		c, err := wire.SignAdmission(ca.Key, m.Cluster.ID(), &wire.AdmissionBody{Serial: 1, Name: "ci", Client: wire.ClientID(key.Public.ID),
			NotBefore: now.Add(-time.Hour).UnixMilli(), NotAfter: now.Add(time.Hour).UnixMilli()})
		require.NoError(t, err)
		return &c
	}
	key := func() *crypto.PrivateKey {
		k, err := crypto.GenerateKey(m.Cluster.Scheme, rand.Reader)
		require.NoError(t, err)
		return k
	}
	a, b := key(), key()
	_, err = s.admission.admit(wire.ClientID(a.Public.ID), cert(old, a))
	require.Error(t, err, "the retired client CA admits no one")
	_, err = s.admission.admit(wire.ClientID(b.Public.ID), cert(cur, b))
	require.NoError(t, err, "the client CA in force does")
}
