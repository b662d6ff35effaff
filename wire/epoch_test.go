package wire_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/testutil"
	"github.com/bq-lock/bq/wire"
)

// epochWorld is a cluster of 4 at epoch 0 and a CA, to sign epochs with,
// and the signing keys of servers 0–3, to endorse them (change 49).
type epochWorld struct {
	cluster wire.ClusterID
	ca      *crypto.PrivateKey
	keys0   []*crypto.Parsed
	privs   map[wire.ServerID]*crypto.PrivateKey
}

func newEpochWorld(t testing.TB) *epochWorld {
	w := &epochWorld{ca: genKey(t), privs: map[wire.ServerID]*crypto.PrivateKey{}}
	for i := range 4 {
		k := genKey(t)
		w.keys0 = append(w.keys0, k.Public)
		w.privs[wire.ServerID(i)] = k
	}
	w.cluster = wire.ClusterIDOf(1, w.keys0)
	return w
}

// endorsed is s endorsed by servers 0–3, whichever of them are members of
// the epoch before it (the others' endorsements count for nothing).
func (w *epochWorld) endorsed(s crypto.Signed) wire.Epoch {
	var b wire.EpochBody
	if err := crypto.Unmarshal(s.Body, &b); err != nil {
		return wire.Epoch{Signed: s}
	}
	return testutil.Endorse(s, w.cluster, b.Number, w.privs)
}

// endorsedAll is each of ss endorsed.
func (w *epochWorld) endorsedAll(ss ...crypto.Signed) []wire.Epoch {
	out := make([]wire.Epoch, len(ss))
	for i, s := range ss {
		out[i] = w.endorsed(s)
	}
	return out
}

func genKey(t testing.TB) *crypto.PrivateKey {
	k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	return k
}

func (w *epochWorld) chain() *wire.Chain {
	return wire.NewChain(w.ca.Public, 1, wire.Keyring{Servers: w.keys0})
}

// member is server id with key k.
func member(id wire.ServerID, k *crypto.Parsed) wire.EpochMember {
	return wire.EpochMember{ID: id, Address: "127.0.0.1:7000", Key: k.Wire, Cert: []byte{0x30}}
}

// next is epoch number after prev (nil: epoch 0) with the given members.
func (w *epochWorld) body(number uint64, prev *crypto.Signed, f uint16, members ...wire.EpochMember) *wire.EpochBody {
	b := &wire.EpochBody{Cluster: w.cluster, Number: number, Prev: [32]byte(w.cluster), Members: members, F: f}
	if prev != nil {
		b.Prev = wire.EpochHash(*prev)
	}
	return b
}

func sign(t testing.TB, ca *crypto.PrivateKey, b *wire.EpochBody) crypto.Signed {
	s, err := wire.SignEpoch(ca, b)
	require.NoError(t, err)
	return s
}

// caCert is a DER CA certificate for k (as certs.NewCA makes).
func caCert(t *testing.T, k *crypto.PrivateKey) []byte {
	priv := ed25519.NewKeyFromSeed(k.Seed())
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "next CA"}, NotBefore: time.Unix(0, 0),
		NotAfter: time.Unix(1<<33, 0), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, priv.Public(), priv)
	require.NoError(t, err)
	return der
}

// docs/protocol.md change 43: a chain adopts the epochs that continue it,
// each signed by the CA in force, naming the one before, keeping every id's
// key and never bringing an id back.
func TestEpochChainAdoptsWhatContinuesIt(t *testing.T) {
	w := newEpochWorld(t)
	s4 := genKey(t).Public
	// Epoch 1: server 2 replaced by server 4 (a new id for a new key).
	e1 := sign(t, w.ca, w.body(1, nil, 1, member(0, w.keys0[0]), member(1, w.keys0[1]), member(3, w.keys0[3]), member(4, s4)))
	// Epoch 2: grow to 7 with f=2.
	grown := []wire.EpochMember{member(0, w.keys0[0]), member(1, w.keys0[1]), member(3, w.keys0[3]), member(4, s4)}
	for id := wire.ServerID(5); id <= 7; id++ {
		grown = append(grown, member(id, genKey(t).Public))
	}
	e2 := sign(t, w.ca, w.body(2, &e1, 2, grown...))

	c := w.chain()
	require.Zero(t, c.Number())
	require.Nil(t, c.Current())
	n, err := c.Extend(w.endorsedAll(e1, e2))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, uint64(2), c.Number())
	require.Equal(t, 7, c.Current().N())
	require.Equal(t, 5, c.Current().Quorum())
	require.Len(t, c.Since(1), 1)
	require.Equal(t, e2, c.Since(1)[0].Signed)
	require.Len(t, c.Since(1)[0].Endorsements, 3, "q of the endorsements")
	require.Empty(t, c.Since(2))

	// Each epoch's keyring: its members' keys by id, named by its number.
	k0, q0, ok := c.Keyring(0)
	require.True(t, ok)
	require.Equal(t, wire.Keyring{Cluster: w.cluster, Servers: w.keys0}, k0)
	require.Equal(t, 3, q0)
	k1, q1, ok := c.Keyring(1)
	require.True(t, ok)
	require.Equal(t, uint64(1), k1.Epoch)
	require.Equal(t, w.cluster, k1.Cluster, "the cluster id is epoch 0's for ever")
	require.Equal(t, 3, q1)
	require.Nil(t, k1.Key(2), "server 2 left in epoch 1")
	require.Equal(t, s4.Wire, k1.Key(4).Wire)
	k2, q2, ok := c.Keyring(2)
	require.True(t, ok)
	require.Equal(t, 5, q2)
	require.NotNil(t, k2.Key(7))
	_, _, ok = c.Keyring(3)
	require.False(t, ok, "an epoch the chain does not hold")

	// Shown again, byte for byte: nothing to adopt, no error.
	n, err = c.Extend(w.endorsedAll(e1, e2))
	require.NoError(t, err)
	require.Zero(t, n)

	// A different epoch 2 (same number): the CA holder's error, refused.
	other := sign(t, w.ca, w.body(2, &e1, 1, member(0, w.keys0[0]), member(1, w.keys0[1]), member(3, w.keys0[3]), member(4, s4)))
	_, err = c.Extend(w.endorsedAll(other))
	require.ErrorIs(t, err, wire.ErrEpochConflict)
	require.Equal(t, 7, c.Current().N(), "the held epoch stays")

	// An epoch after a partly valid list: the valid prefix is kept.
	c = w.chain()
	n, err = c.Extend(w.endorsedAll(e1, sign(t, genKey(t), w.body(2, &e1, 1, grown[:4]...))))
	require.ErrorIs(t, err, wire.ErrInvalid)
	require.Equal(t, 1, n)
	require.Equal(t, uint64(1), c.Number())
}

// Every way an epoch can fail to continue the chain is refused, each for
// its own reason, and the same epoch made right is adopted.
func TestEpochChainRefuses(t *testing.T) {
	w := newEpochWorld(t)
	all := func() []wire.EpochMember {
		return []wire.EpochMember{member(0, w.keys0[0]), member(1, w.keys0[1]), member(2, w.keys0[2]), member(3, w.keys0[3])}
	}
	good := w.body(1, nil, 1, all()...)
	require.NoError(t, w.extendOne(w.chain(), sign(t, w.ca, good)))

	for _, c := range []struct {
		name string
		make func() crypto.Signed
		want string
	}{
		{"another CA", func() crypto.Signed { return sign(t, genKey(t), good) }, "not signed by the cluster CA"},
		{"another cluster", func() crypto.Signed {
			b := *good
			b.Cluster[0] ^= 1
			return sign(t, w.ca, &b)
		}, "cluster"},
		{"a number skipped", func() crypto.Signed {
			b := *good
			b.Number = 2
			return sign(t, w.ca, &b)
		}, "does not follow"},
		{"another predecessor", func() crypto.Signed {
			b := *good
			b.Prev[0] ^= 1
			return sign(t, w.ca, &b)
		}, "names another epoch"},
		{"an id with another key", func() crypto.Signed {
			m := all()
			m[2] = member(2, genKey(t).Public)
			return sign(t, w.ca, w.body(1, nil, 1, m...))
		}, "another key"},
		{"n < 3f+1", func() crypto.Signed {
			s, err := crypto.Seal(w.ca, crypto.DomainEpoch, w.body(1, nil, 1, all()[:3]...))
			require.NoError(t, err)
			return s
		}, "at least 3f+1"},
		{"ids not ascending", func() crypto.Signed {
			m := all()
			m[0], m[1] = m[1], m[0]
			s, err := crypto.Seal(w.ca, crypto.DomainEpoch, w.body(1, nil, 1, m...))
			require.NoError(t, err)
			return s
		}, "ascend"},
	} {
		err := w.extendOne(w.chain(), c.make())
		require.ErrorContains(t, err, c.want, c.name)
	}

	// An id an epoch left out never comes back.
	c := w.chain()
	e1 := sign(t, w.ca, w.body(1, nil, 1, member(0, w.keys0[0]), member(1, w.keys0[1]), member(3, w.keys0[3]), member(4, genKey(t).Public)))
	require.NoError(t, w.extendOne(c, e1))
	back := sign(t, w.ca, w.body(2, &e1, 1, all()...))
	require.ErrorContains(t, w.extendOne(c, back), "never reused")
}

// A CA rotation: the epoch that names the next CA is the last the old one
// signs.
func TestEpochChainRotatesTheCA(t *testing.T) {
	w := newEpochWorld(t)
	next := genKey(t)
	members := []wire.EpochMember{member(0, w.keys0[0]), member(1, w.keys0[1]), member(2, w.keys0[2]), member(3, w.keys0[3])}
	b1 := w.body(1, nil, 1, members...)
	b1.NextCA = caCert(t, next)
	e1 := sign(t, w.ca, b1)
	c := w.chain()
	require.NoError(t, w.extendOne(c, e1))
	require.ErrorContains(t, w.extendOne(c, sign(t, w.ca, w.body(2, &e1, 1, members...))), "not signed by the cluster CA", "the old CA signs no more")
	require.NoError(t, w.extendOne(c, sign(t, next, w.body(2, &e1, 1, members...))))
	require.Equal(t, uint64(2), c.Number())
}

func (w *epochWorld) extendOne(c *wire.Chain, s crypto.Signed) error {
	_, err := c.Extend(w.endorsedAll(s))
	return err
}

// FuzzEpochChainExtend: whatever bytes are shown as epochs, Extend never
// panics, and adopts nothing that the CA did not sign.
func FuzzEpochChainExtend(f *testing.F) {
	w := newEpochWorld(f)
	good := sign(f, w.ca, w.body(1, nil, 1, member(0, w.keys0[0]), member(1, w.keys0[1]), member(2, w.keys0[2]), member(3, w.keys0[3])))
	f.Add(good.Body, good.Sig)
	f.Add([]byte{0xa1, 0x02, 0x01}, []byte{})
	f.Fuzz(func(t *testing.T, body, sig []byte) {
		c := w.chain()
		s := crypto.Signed{Body: body, Sig: sig}
		n, err := c.Extend(w.endorsedAll(s))
		if err != nil {
			require.Zero(t, n)
			require.Zero(t, c.Number())
			return
		}
		if n == 1 {
			require.True(t, w.ca.Public.Verify(crypto.DomainEpoch, body, sig), "adopted only what the CA signed")
		}
	})
}

// docs/protocol.md change 43, "signed bodies name their epoch": a View or
// vote counts only for a verifier in the epoch it names, so votes of e never
// make a certificate in e+1 and a J is Views of one epoch; a body of epoch 0
// has the bytes it had before epochs (omitted), and one of another epoch is
// refused as ErrOtherEpoch, which is no verdict on its signer.
func TestViewsAndVotesCountInTheirEpochOnly(t *testing.T) {
	f := fx(t)
	in := func(e uint64) wire.Keyring { k := f.keys; k.Epoch = e; return k }
	requireOther := func(t *testing.T, err error, got, want uint64) {
		t.Helper()
		require.ErrorIs(t, err, wire.ErrOtherEpoch)
		require.ErrorContains(t, err, fmt.Sprintf("of epoch %d, this verifier is in epoch %d", got, want))
	}

	for _, e := range []uint64{0, 1, 7} {
		view, err := wire.SignView(f.servers[1], f.keys.Cluster, &wire.ViewBody{Lock: testLock, For: id(f.alice), ForSession: 3, ForAttempt: 2, Server: 1, Epoch: e})
		require.NoError(t, err)
		body, err := view.Verify(in(e))
		require.NoError(t, err, "epoch %d in its own epoch", e)
		require.Equal(t, e, body.Epoch)
		for _, other := range []uint64{e + 1, e ^ 1} {
			_, err = view.Verify(in(other))
			requireOther(t, err, e, other)
		}

		cert := wire.ResetCertificate{Client: id(f.alice), Session: 3}
		for s := range f.q {
			v, err := wire.SignSuspect(f.servers[s], f.keys.Cluster, &wire.SuspectBody{Client: id(f.alice), Session: 3, Server: wire.ServerID(s), Reason: wire.SuspectMute, Epoch: e})
			require.NoError(t, err)
			cert.Votes = append(cert.Votes, v)
		}
		require.NoError(t, cert.Verify(in(e), f.q))
		requireOther(t, cert.Verify(in(e+1), f.q), e, e+1)
	}

	// Epoch 0 is omitted: a View of epoch 0 signs the bytes of a View
	// made before epochs existed.
	view, err := wire.SignView(f.servers[0], f.keys.Cluster, &wire.ViewBody{Lock: testLock, For: id(f.alice), Server: 0})
	require.NoError(t, err)
	var fields map[int]any
	require.NoError(t, crypto.Unmarshal(view.Signed.Body, &fields))
	require.NotContains(t, fields, 10, "epoch 0 is not encoded")
	one, err := wire.SignView(f.servers[0], f.keys.Cluster, &wire.ViewBody{Lock: testLock, For: id(f.alice), Server: 0, Epoch: 1})
	require.NoError(t, err)
	fields = nil
	require.NoError(t, crypto.Unmarshal(one.Signed.Body, &fields))
	require.Contains(t, fields, 10)
}

// A View or vote whose signer this verifier does not know, or whose
// signature is not its key's, is ErrOtherEpoch when it names another epoch
// (a member added later is unknown to a verifier still in an earlier one:
// that is no evidence), and invalid when it names this one.
func TestUnknownSignersOfAnotherEpochAreNoEvidence(t *testing.T) {
	f := fx(t)
	later := f.keys
	later.Epoch = 1
	for _, e := range []uint64{0, 1} {
		byOutsider, err := wire.SignView(f.outsider, f.keys.Cluster, &wire.ViewBody{Lock: testLock, For: id(f.alice), Server: 9, Epoch: e})
		require.NoError(t, err)
		forged, err := wire.SignView(f.outsider, f.keys.Cluster, &wire.ViewBody{Lock: testLock, For: id(f.alice), Server: 2, Epoch: e})
		require.NoError(t, err)
		vote, err := wire.SignSuspect(f.outsider, f.keys.Cluster, &wire.SuspectBody{Client: id(f.alice), Session: 1, Server: 9, Reason: wire.SuspectMute, Epoch: e})
		require.NoError(t, err)
		_, errUnknown := byOutsider.Verify(later)
		_, errForged := forged.Verify(later)
		_, errVote := vote.Verify(later)
		for _, err := range []error{errUnknown, errForged, errVote} {
			require.ErrorIs(t, err, wire.ErrInvalid)
			if e == later.Epoch {
				require.NotErrorIs(t, err, wire.ErrOtherEpoch, "a body of this epoch that does not verify is invalid")
			} else {
				require.ErrorIs(t, err, wire.ErrOtherEpoch)
			}
		}
	}
}

// docs/protocol.md change 43, "ids are never reused": every id up to and
// including the highest ever used is retired once an epoch leaves it out,
// the highest too. Else server add, remove and a later epoch could bring
// back the last id added — a key the operator retired, perhaps because it
// leaked — and a signature of its old epoch would count for its new one.
func TestTheHighestIdUsedIsNeverReused(t *testing.T) {
	w := newEpochWorld(t)
	k4 := genKey(t).Public
	four := []wire.EpochMember{member(0, w.keys0[0]), member(1, w.keys0[1]), member(2, w.keys0[2]), member(3, w.keys0[3])}
	e1 := sign(t, w.ca, w.body(1, nil, 1, append(four, member(4, k4))...)) // server add: id 4, the highest
	e2 := sign(t, w.ca, w.body(2, &e1, 1, four...))                        // server remove 4
	c := w.chain()
	require.NoError(t, w.extendOne(c, e1))
	require.NoError(t, w.extendOne(c, e2))
	back := sign(t, w.ca, w.body(3, &e2, 1, append(four, member(4, k4))...)) // id 4 again, its own key
	require.ErrorContains(t, w.extendOne(c, back), "never reused", "the highest id ever used is retired too")
	require.Equal(t, uint64(2), c.Number())
	k5 := genKey(t).Public
	require.NoError(t, w.extendOne(c, sign(t, w.ca, w.body(3, &e2, 1, append(four, member(5, k5))...))), "the next id never used is taken")
}

// docs/protocol.md change 43, key lifecycle: the next CA an epoch names is a
// CA certificate. Else a CA rotation could name a leaf certificate — a
// member's or a client's, whose key may sit on any host — and its key would
// sign every later epoch: whoever holds it adds members at will.
func TestAnEpochsNextCAMustBeACACertificate(t *testing.T) {
	w := newEpochWorld(t)
	next := genKey(t)
	members := []wire.EpochMember{member(0, w.keys0[0]), member(1, w.keys0[1]), member(2, w.keys0[2]), member(3, w.keys0[3])}
	leaf := func() []byte {
		priv := ed25519.NewKeyFromSeed(next.Seed())
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "a member, not a CA"}, NotBefore: time.Unix(0, 0),
			NotAfter: time.Unix(1<<33, 0), IsCA: false, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, priv.Public(), priv)
		require.NoError(t, err)
		return der
	}()
	b := w.body(1, nil, 1, members...)
	b.NextCA = leaf
	c := w.chain()
	require.ErrorContains(t, w.extendOne(c, sign(t, w.ca, b)), "next CA", "a leaf certificate is no CA")
	require.Zero(t, c.Number())
	b.NextCA = caCert(t, next)
	require.NoError(t, w.extendOne(c, sign(t, w.ca, b)), "the same key in a CA certificate is")
}

// docs/protocol.md change 65: the approvers in force on an open cluster are
// those of the newest epoch that names any, else the cluster file's. A key
// an epoch rotated away approves nothing once that epoch is held, and an
// epoch that names none leaves the ones before in force (an omission never
// brings back a retired key). An epoch names at most MaxApprovers, each a
// key that parses, and one that names none keeps the bytes it had before.
func TestTheApproversInForceAreTheNewestNamed(t *testing.T) {
	w := newEpochWorld(t)
	first, second := genKey(t), genKey(t)
	members := []wire.EpochMember{member(0, w.keys0[0]), member(1, w.keys0[1]), member(2, w.keys0[2]), member(3, w.keys0[3])}
	c := w.chain()
	require.Empty(t, c.Approvers(nil), "a cluster file without an approver: none in force")
	require.Equal(t, []*crypto.Parsed{first.Public}, c.Approvers(first.Public))

	b1 := w.body(1, nil, 1, members...)
	b1.Approvers = []crypto.PublicKey{second.Public.Wire}
	e1 := sign(t, w.ca, b1)
	require.NoError(t, w.extendOne(c, e1))
	require.Equal(t, []*crypto.Parsed{second.Public}, c.Approvers(first.Public), "the rotation retires the cluster file's")
	e2 := sign(t, w.ca, w.body(2, &e1, 1, members...))
	require.NoError(t, w.extendOne(c, e2))
	require.Equal(t, []*crypto.Parsed{second.Public}, c.Approvers(first.Public), "an epoch naming none keeps the newest named")

	// Bounds: as many as MaxApprovers, each parsing.
	many := w.body(3, &e2, 1, members...)
	for range wire.MaxApprovers + 1 {
		many.Approvers = append(many.Approvers, genKey(t).Public.Wire)
	}
	_, err := wire.SignEpoch(w.ca, many)
	require.ErrorContains(t, err, "approvers (the limit is 4)")
	many.Approvers = []crypto.PublicKey{{Scheme: crypto.Ed25519, Key: []byte{1, 2, 3}}}
	_, err = wire.SignEpoch(w.ca, many)
	require.ErrorContains(t, err, "approver")

	// Omitted when empty: an epoch naming none encodes as before the field.
	type before struct {
		Cluster   wire.ClusterID     `cbor:"1,keyasint"`
		Number    uint64             `cbor:"2,keyasint"`
		Prev      [32]byte           `cbor:"3,keyasint"`
		Members   []wire.EpochMember `cbor:"4,keyasint"`
		F         uint16             `cbor:"5,keyasint"`
		ClientCAs []crypto.PublicKey `cbor:"6,keyasint,omitempty"`
		NextCA    []byte             `cbor:"7,keyasint,omitempty"`
	}
	b := w.body(1, nil, 1, members...)
	now, err := crypto.Marshal(b)
	require.NoError(t, err)
	old, err := crypto.Marshal(&before{Cluster: b.Cluster, Number: b.Number, Prev: b.Prev, Members: b.Members, F: b.F})
	require.NoError(t, err)
	require.Equal(t, old, now)
}
