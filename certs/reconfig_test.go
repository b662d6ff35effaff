package certs

import (
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/testutil"
	"github.com/bq-lock/bq/wire"
)

func sid(i int) *wire.ServerID { id := wire.ServerID(i); return &id }

// docs/protocol.md change 43, the operator's side: server replace gives the
// new member the next id never used (ids are never reused) and keeps f;
// add and remove let f follow n; each epoch continues the one before, its
// file reads back as written, and the new member's material loads as a
// server of the cluster while the removed one still loads (to seal).
func TestPlanChangeReplaceAddRemove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	now := time.Now()
	_, err := Init(InitOptions{Dir: dir, Servers: 4, F: 1, Host: "127.0.0.1", PortBase: 7000}, now, rand.Reader)
	require.NoError(t, err)

	p, err := PlanChange(dir, Change{Remove: sid(2), Add: true}, now, rand.Reader)
	require.NoError(t, err)
	writeEndorsed(t, dir, p)
	require.Equal(t, uint64(1), p.Next.Number)
	require.Equal(t, []wire.ServerID{0, 1, 3, 4}, memberIDs(p.Next))
	require.Equal(t, uint16(1), p.Next.F)
	require.Equal(t, "127.0.0.1:7004", p.Added.Entry.Address, "the removed member's host, the next port above every member's")

	m4, err := LoadServer(dir, 4)
	require.NoError(t, err)
	require.Equal(t, wire.ServerID(4), m4.ID)
	require.Equal(t, "127.0.0.1:7004", m4.Address)
	require.Len(t, m4.Epochs, 1)
	m2, err := LoadServer(dir, 2)
	require.NoError(t, err, "a removed member still starts: it seals and hands its state over")
	require.Len(t, m2.Epochs, 1)
	require.Equal(t, uint64(1), m2.LeftIn, "it knows the change that left it out")
	require.Zero(t, m4.LeftIn)
	// Its keys destroyed as the runbook says, it is told to stay stopped,
	// never to restore them (issue 44).
	require.NoError(t, os.RemoveAll(ServerDir(dir, 2)))
	_, err = LoadServer(dir, 2)
	require.ErrorContains(t, err, "server 2 left the cluster in epoch 1")
	require.ErrorContains(t, err, "must stay stopped")
	require.NotContains(t, err.Error(), "copy the whole")

	p, err = PlanChange(dir, Change{Add: true, Host: "127.0.0.1", Port: 7100}, now, rand.Reader)
	require.NoError(t, err)
	writeEndorsed(t, dir, p)
	require.Equal(t, []wire.ServerID{0, 1, 3, 4, 5}, memberIDs(p.Next), "id 2 is never used again")
	require.Equal(t, uint16(1), p.Next.F)

	for _, add := range []int{7101, 7102} {
		p, err = PlanChange(dir, Change{Add: true, Host: "127.0.0.1", Port: add}, now, rand.Reader)
		require.NoError(t, err)
		writeEndorsed(t, dir, p)
	}
	require.Equal(t, 7, p.Next.N())
	require.Equal(t, uint16(2), p.Next.F, "seven members tolerate two faults")

	p, err = PlanChange(dir, Change{Remove: sid(0)}, now, rand.Reader)
	require.NoError(t, err)
	writeEndorsed(t, dir, p)
	require.Equal(t, uint16(1), p.Next.F, "six members tolerate one")

	_, err = PlanChange(dir, Change{Remove: sid(2)}, now, rand.Reader)
	require.ErrorContains(t, err, "server 2 is not a member of epoch 5")

	epochs, err := ReadEpochs(dir)
	require.NoError(t, err)
	require.Len(t, epochs, 5)
	c, err := LoadCluster(filepath.Join(dir, ClusterFileName))
	require.NoError(t, err)
	chain := c.Chain()
	n, err := chain.Extend(epochs)
	require.NoError(t, err)
	require.Equal(t, 5, n)

	// A gap in the files is said plainly.
	require.NoError(t, os.Remove(EpochPath(dir, 3)))
	_, err = ReadEpochs(dir)
	require.ErrorContains(t, err, "epoch 3 is missing")
	_, err = LoadServer(dir, 0)
	require.ErrorContains(t, err, "epoch 3 is missing")
}

// A server id no epoch and not the cluster file names is refused with
// where it looked.
func TestLoadServerOfNoEpoch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	_, err := Init(InitOptions{Dir: dir, Servers: 4, F: 1}, time.Now(), rand.Reader)
	require.NoError(t, err)
	_, err = LoadServer(dir, 4)
	require.ErrorContains(t, err, "server id 4 is out of range")
	require.ErrorContains(t, err, "no epoch in")
}

// The roster a runtime dials follows the epochs it is given: a removed
// member's certificate stops naming a server once no epoch dealt with
// names it.
func TestRosterFollowsTheEpochs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	now := time.Now()
	c, err := Init(InitOptions{Dir: dir, Servers: 4, F: 1}, now, rand.Reader)
	require.NoError(t, err)
	r := NewRoster(c)
	id, ok := r.ServerByCert(c.Servers[2].Cert)
	require.True(t, ok)
	require.Equal(t, wire.ServerID(2), id)

	for _, ch := range []Change{{Remove: sid(2), Add: true}, {Remove: sid(0)}} {
		p, err := PlanChange(dir, ch, now, rand.Reader)
		require.NoError(t, err)
		writeEndorsed(t, dir, p)
	}
	epochs, err := ReadEpochs(dir)
	require.NoError(t, err)
	chain := c.Chain()
	_, err = chain.Extend(epochs[:1])
	require.NoError(t, err)
	changed, err := r.Follow(chain, 1, 0)
	require.NoError(t, err)
	require.True(t, changed)
	require.Len(t, r.Addresses(nil), 5, "epochs 0 and 1: the four and the new one")
	_, ok = r.ServerByCert(c.Servers[2].Cert)
	require.True(t, ok, "epoch 0's members hand their state to epoch 1")

	_, err = chain.Extend(epochs[1:])
	require.NoError(t, err)
	_, err = r.Follow(chain, 2)
	require.NoError(t, err)
	_, ok = r.ServerByCert(c.Servers[2].Cert)
	require.False(t, ok, "the removed member is nobody to a roster of epoch 2")
	self := wire.ServerID(1)
	require.NotContains(t, r.Addresses(&self), self)
	require.Len(t, r.Addresses(nil), 3)
}

func memberIDs(b *wire.EpochBody) []wire.ServerID {
	var out []wire.ServerID
	for _, m := range b.Members {
		out = append(out, m.ID)
	}
	return out
}

// docs/protocol.md change 43, key lifecycle: a CA rotation is an epoch
// with the same members, signed by the old CA, naming the new one, which
// signs every later epoch and issues the certificates of members added
// after it; the old CA's key is gone from DIR, and the TLS pool trusts both
// (a member's certificate stays valid to its end).
func TestRotateTheClusterCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	now := time.Now()
	c, err := Init(InitOptions{Dir: dir, Servers: 4, F: 1}, now, rand.Reader)
	require.NoError(t, err)
	old, err := LoadCA(dir)
	require.NoError(t, err)

	_, err = PlanChange(dir, Change{RotateCA: true, Add: true}, now, rand.Reader)
	require.ErrorContains(t, err, "a CA rotation changes no member")
	p, err := PlanChange(dir, Change{RotateCA: true}, now, rand.Reader)
	require.NoError(t, err)
	writeEndorsed(t, dir, p)
	require.Equal(t, memberIDs(p.Before), memberIDs(p.Next))
	require.Equal(t, p.Before.F, p.Next.F)
	_, err = os.Stat(filepath.Join(dir, CADirName, caNextKeyFile))
	require.ErrorIs(t, err, os.ErrNotExist, "the new key took the old one's place")

	ca, err := LoadCA(dir)
	require.NoError(t, err)
	require.False(t, ca.Key.Equal(old.Key), "the CA in force is the new one")
	require.Contains(t, ca.Cert.Subject.CommonName, "(epoch 1)")

	p, err = PlanChange(dir, Change{Remove: sid(1), Add: true}, now, rand.Reader)
	require.NoError(t, err)
	writeEndorsed(t, dir, p)
	epochs, err := ReadEpochs(dir)
	require.NoError(t, err)
	chain := c.Chain()
	_, err = chain.Extend(epochs)
	require.NoError(t, err, "epoch 2 is signed by the new CA")
	m, err := LoadServer(dir, 4)
	require.NoError(t, err)
	_, err = m.TLS.Leaf.Verify(x509.VerifyOptions{Roots: c.CAPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.Error(t, err, "the new member's certificate is the new CA's")
	_, err = m.TLS.Leaf.Verify(x509.VerifyOptions{Roots: c.CAPoolOf(chain), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err)
	_, err = c.Servers[0].Cert.Verify(x509.VerifyOptions{Roots: c.CAPoolOf(chain), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err, "and the old members' stay valid")
	issuer, inForce := c.IssuerOf(chain, m.TLS.Leaf)
	require.True(t, issuer.Equal(ca.Cert) && inForce, "the new member depends on the CA in force")
	issuer, inForce = c.IssuerOf(chain, c.Servers[0].Cert)
	require.True(t, issuer.Equal(c.CA), "a member added before the rotation depends on the old CA to its end")
	require.False(t, inForce)
	issuer, inForce = c.IssuerOf(nil, c.Servers[0].Cert)
	require.True(t, issuer.Equal(c.CA) && inForce, "without epochs, the cluster file's CA")
	issuer, _ = c.IssuerOf(nil, m.TLS.Leaf)
	require.Nil(t, issuer, "a certificate no CA of the chain issued")

	// An epoch signed with the retired key does not continue the chain.
	signer, err := old.EpochSigner()
	require.NoError(t, err)
	b := *p.Next
	b.Number, b.Prev = 3, wire.EpochHash(p.Proposal.Proposal)
	forged, err := wire.SignEpoch(signer, &b)
	require.NoError(t, err)
	_, err = chain.Extend([]wire.Epoch{{Signed: forged}})
	require.ErrorContains(t, err, "not signed by the cluster CA in force")
}

// docs/protocol.md change 43, key lifecycle: the client CA rotates by an
// epoch listing the old and the new; the new one enrolls, renews and
// revokes from then on, certificates of both admit until the old is
// retired by an epoch listing the new alone, and a revocation of any CA
// ever listed stays valid.
func TestRotateTheClientCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	now := time.Now()
	c, err := Init(InitOptions{Dir: dir, Servers: 4, Closed: true}, now, rand.Reader)
	require.NoError(t, err)
	enroll := func(ca *ClientCA, name string) crypto.Signed {
		k, err := crypto.GenerateKey(c.Scheme, rand.Reader)
		require.NoError(t, err)
		s, _, err := ca.Enroll(EnrollOptions{Name: name, Key: k.Public, Record: true}, now, rand.Reader)
		require.NoError(t, err)
		return s
	}
	old, err := LoadClientCA(dir)
	require.NoError(t, err)
	a := enroll(old, "a")

	p, err := PlanChange(dir, Change{RotateClientCA: true}, now, rand.Reader)
	require.NoError(t, err)
	writeEndorsed(t, dir, p)
	require.Len(t, p.Next.ClientCAs, 2)
	cur, err := LoadClientCA(dir)
	require.NoError(t, err)
	require.NotEqual(t, old.Key.Public.ID, cur.Key.Public.ID, "the new key took the old one's place")
	b := enroll(cur, "b")
	chain, _, err := c.ChainIn(dir)
	require.NoError(t, err)
	inForce, _ := chain.ClientCAs(c.ClientCA)
	for _, s := range []crypto.Signed{a, b} {
		_, err := wire.VerifyAdmissionAny(inForce, c.ID(), s)
		require.NoError(t, err, "both CAs admit until the old is retired")
	}
	rev, _, err := cur.Revoke("a", now)
	require.NoError(t, err, "the new CA revokes a client the old one enrolled")

	_, err = PlanChange(dir, Change{RotateClientCA: true, Add: true}, now, rand.Reader)
	require.ErrorContains(t, err, "a change of its own")
	stale, err := cur.NotRenewed(now)
	require.NoError(t, err)
	require.Empty(t, stale, "a, enrolled by the old CA, is revoked")
	enroll(old, "c") // as an operator with the old key might
	stale, err = cur.NotRenewed(now)
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, stale)
	p, err = PlanChange(dir, Change{RetireClientCAs: true}, now, rand.Reader)
	require.NoError(t, err)
	writeEndorsed(t, dir, p)
	chain, _, err = c.ChainIn(dir)
	require.NoError(t, err)
	inForce, ever := chain.ClientCAs(c.ClientCA)
	require.Len(t, inForce, 1)
	_, err = wire.VerifyAdmissionAny(inForce, c.ID(), a)
	require.ErrorContains(t, err, "not signed by", "the retired CA admits no one")
	_, err = wire.VerifyAdmissionAny(inForce, c.ID(), b)
	require.NoError(t, err)
	_, err = wire.VerifyRevocationAny(ever, c.ID(), rev)
	require.NoError(t, err)
	_, err = PlanChange(dir, Change{RetireClientCAs: true}, now, rand.Reader)
	require.ErrorContains(t, err, "nothing to retire")

	for range wire.MaxClientCAs - 1 {
		p, err = PlanChange(dir, Change{RotateClientCA: true}, now, rand.Reader)
		require.NoError(t, err)
		writeEndorsed(t, dir, p)
	}
	_, err = PlanChange(dir, Change{RotateClientCA: true}, now, rand.Reader)
	require.ErrorContains(t, err, "retire the old ones first")
}

// Issue 28: a cluster outlives its first certificates. Five years after
// init every first member's certificate has ended; replacing them gives
// new members with certificates of their own, and the cluster file — whose
// server certificates are the first members' — still loads for every
// client, server and command, while an expired member itself does not
// start. Ten years after, the first CA ends too; a rotation before then
// names the CA in force, whose dates are the ones that count.
func TestClusterOutlivesItsFirstCertificates(t *testing.T) {
	day := 24 * time.Hour
	dir := filepath.Join(t.TempDir(), "c")
	now := time.Now()
	_, err := Init(InitOptions{Dir: dir, Servers: 4, F: 1}, now.Add(-ServerValidity-10*day), rand.Reader)
	require.NoError(t, err)
	_, err = LoadServer(dir, 1)
	require.ErrorContains(t, err, "server 1's TLS certificate expired on", "a first member does not start")
	one := wire.ServerID(1)
	p, err := PlanChange(dir, Change{Remove: &one, Add: true}, now, rand.Reader)
	require.NoError(t, err, "the operator can replace it")
	writeEndorsed(t, dir, p)
	_, err = LoadCluster(filepath.Join(dir, ClusterFileName))
	require.NoError(t, err)
	m, err := LoadServer(dir, 4)
	require.NoError(t, err, "its replacement starts")
	require.True(t, m.TLS.Leaf.NotAfter.After(now.Add(ServerValidity-day)))
	c, err := LoadCluster(filepath.Join(dir, ClusterFileName))
	require.NoError(t, err)
	chain, _, err := c.ChainIn(dir)
	require.NoError(t, err)
	got := strings.Join(Expiring(c, chain, nil, now), "\n")
	for _, id := range []int{0, 2, 3} {
		require.Contains(t, got, fmt.Sprintf("server %d's certificate expired on", id))
	}
	require.NotContains(t, got, "server 1's", "a client is told about the members in force")
	require.NotContains(t, got, "server 4's")

	dir = filepath.Join(t.TempDir(), "d")
	_, err = Init(InitOptions{Dir: dir, Servers: 4, F: 1}, now.Add(-CAValidity+10*day), rand.Reader)
	require.NoError(t, err)
	p, err = PlanChange(dir, Change{RotateCA: true}, now, rand.Reader)
	require.NoError(t, err)
	_, err = loadCluster(filepath.Join(dir, ClusterFileName), now.Add(20*day))
	require.ErrorContains(t, err, "ca: the cluster CA certificate expired on", "before the rotation is written")
	writeEndorsed(t, dir, p)
	_, err = loadCluster(filepath.Join(dir, ClusterFileName), now.Add(20*day))
	require.NoError(t, err, "the first CA ended; the one in force did not")
	_, err = loadCluster(filepath.Join(dir, ClusterFileName), now.Add(CAValidity+day))
	require.ErrorContains(t, err, "the cluster CA certificate in force (named by epoch 1) expired on")
}

// writeEndorsed writes p as the operator's command does once the members
// endorsed it (change 49): the proposal, then each member of the epoch
// before endorses it with its key in dir, and the epoch takes its place.
func writeEndorsed(t *testing.T, dir string, p *Plan) {
	t.Helper()
	require.NoError(t, p.Write(dir))
	endorseWritten(t, dir, p)
}

// endorseWritten makes plan p's proposal, written, an epoch.
func endorseWritten(t *testing.T, dir string, p *Plan) {
	t.Helper()
	signers := map[wire.ServerID]*crypto.PrivateKey{}
	endorsers := map[wire.ServerID]*wire.Endorser{}
	for _, m := range p.Before.Members {
		if m.Endorse != nil {
			en, err := LoadMemberEndorser(dir, m.ID, m.Endorse)
			require.NoError(t, err)
			endorsers[m.ID] = en
			continue
		}
		data, err := readPrivate(filepath.Join(ServerDir(dir, int(m.ID)), SigningKeyFile), true)
		require.NoError(t, err)
		k, err := parseSigningKey(data)
		require.NoError(t, err)
		signers[m.ID] = k
	}
	ep := testutil.EndorseAs(p.Proposal.Proposal, p.Next.Cluster, p.Next.Number, signers, endorsers)
	for id, en := range endorsers {
		require.NoError(t, NewEndorseKeyStore(ServerDir(dir, int(id))).Write(en.State()))
	}
	require.NoError(t, Complete(dir, p.Next.Number, ep))
}

// The operator's side of change 49: a change is a proposal, not an epoch,
// until q members endorse it; a second change waits for it (one change at a
// time, so the proposal's number stays the next); on a closed cluster the
// proposal carries the approval of the client CA in force, bound to it.
func TestAChangeIsAProposalUntilEndorsed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	now := time.Now()
	cl, err := Init(InitOptions{Dir: dir, Servers: 4, F: 1, Host: "127.0.0.1", PortBase: 7000, Closed: true}, now, rand.Reader)
	require.NoError(t, err)

	p, err := PlanChange(dir, Change{Remove: sid(2), Add: true}, now, rand.Reader)
	require.NoError(t, err)
	require.NoError(t, p.Write(dir))
	_, err = os.Stat(EpochPath(dir, 1))
	require.ErrorIs(t, err, os.ErrNotExist, "no epoch before its endorsements")
	got, ok, err := ReadProposal(dir, 1)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, wire.VerifyApproval([]*crypto.Parsed{cl.ClientCA}, cl.ID(), 1, got.Proposal, got.Approval),
		"approved by the client CA, for this epoch")

	_, err = PlanChange(dir, Change{Add: true, Host: "127.0.0.1", Port: 7100}, now, rand.Reader)
	require.ErrorContains(t, err, "epoch 1 is proposed")
	require.ErrorContains(t, err, "one change at a time")

	endorseWritten(t, dir, p)
	_, ok, err = ReadProposal(dir, 1)
	require.NoError(t, err)
	require.False(t, ok, "the endorsed epoch took the proposal's place")
	_, err = PlanChange(dir, Change{Add: true, Host: "127.0.0.1", Port: 7100}, now, rand.Reader)
	require.NoError(t, err, "the next change may start")
}

// A new member's address must be its own (issue 44): one a member of the
// next epoch serves at, however it is spelled, is refused before anything
// is signed; the address of the member it replaces is its to take.
func TestPlanChangeRefusesAMembersAddress(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	now := time.Now()
	_, err := Init(InitOptions{Dir: dir, Servers: 4, F: 1, Host: "127.0.0.1", PortBase: 7000}, now, rand.Reader)
	require.NoError(t, err)

	for _, place := range []struct {
		host string
		port int
	}{{"127.0.0.1", 7001}, {"127.0.0.1", 7003}} {
		_, err = PlanChange(dir, Change{Add: true, Host: place.host, Port: place.port}, now, rand.Reader)
		require.ErrorContains(t, err, fmt.Sprintf("127.0.0.1:%d is server %d's address", place.port, place.port-7000))
	}
	_, err = PlanChange(dir, Change{Remove: sid(0), Add: true, Host: "127.0.0.1", Port: 7001}, now, rand.Reader)
	require.ErrorContains(t, err, "is server 1's address")
	_, err = PlanChange(dir, Change{Add: true, Host: "", Port: 7002}, now, rand.Reader)
	require.ErrorContains(t, err, "is server 2's address", "the default host is the first member's")
	_, err = PlanChange(dir, Change{Add: true, Host: "0.0.0.0", Port: 7100}, now, rand.Reader)
	require.ErrorContains(t, err, "the new server's address")
	_, err = os.Stat(ProposalPath(dir, 1))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing written")

	p, err := PlanChange(dir, Change{Remove: sid(2), Add: true, Host: "127.0.0.1", Port: 7002}, now, rand.Reader)
	require.NoError(t, err, "a replacement may take the replaced member's address")
	require.Equal(t, "127.0.0.1:7002", p.Added.Entry.Address)
}
