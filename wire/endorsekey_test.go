package wire_test

import (
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// docs/protocol.md change 64: a member's endorsement keys are one per epoch
// number, and Sign destroys the key it used and every earlier one: a member
// endorses one epoch of a number, and a copy of its files taken later signs
// no epoch it already endorsed or held.
func TestEndorserSignsEachEpochOnceAndForgets(t *testing.T) {
	en, err := wire.NewEndorser(rand.Reader, 3, 8)
	require.NoError(t, err)
	keys := en.Keys()
	require.Equal(t, uint64(3), keys.First)
	require.Equal(t, uint64(10), keys.Last())
	leaves, state := en.Leaves(), en.State()

	var cluster wire.ClusterID
	var epoch crypto.Signed
	epoch.Body = []byte("an epoch")
	ring := wire.Keyring{Servers: []*crypto.Parsed{genKey(t).Public}, Endorse: []*wire.EndorseKeys{&keys}}
	es, err := en.Sign(cluster, 0, 5, epoch)
	require.NoError(t, err)
	b, err := es.Verify(ring)
	require.NoError(t, err)
	require.Equal(t, uint64(5), b.Number)
	require.Equal(t, uint64(6), en.Next(), "the key of epoch 5 and those before it are gone")
	for _, n := range []uint64{3, 4, 5, 11} {
		_, err := en.Sign(cluster, 0, n, epoch)
		require.Error(t, err, "epoch %d", n)
	}

	// The state persisted before the signature brings back no key.
	again, err := wire.LoadEndorser(keys, leaves, en.State())
	require.NoError(t, err)
	_, err = again.Sign(cluster, 0, 5, epoch)
	require.Error(t, err)
	require.False(t, again.Forget(4), "nothing left to destroy below 6")
	require.True(t, again.Forget(7))
	require.Equal(t, uint64(8), again.Next())
	require.True(t, again.Forget(100))
	require.Equal(t, uint64(11), again.Next())
	_, err = again.Sign(cluster, 0, 10, epoch)
	require.Error(t, err, "every key destroyed")

	// A state of other keys, or leaves of another root, are refused.
	other, err := wire.NewEndorser(rand.Reader, 3, 8)
	require.NoError(t, err)
	_, err = wire.LoadEndorser(keys, leaves, other.State())
	require.Error(t, err)
	_, err = wire.LoadEndorser(keys, other.Leaves(), state)
	require.Error(t, err)
	_, err = wire.LoadEndorser(keys, leaves, state[:10])
	require.Error(t, err)
}

// docs/protocol.md change 64: where a member's epoch names its endorsement
// keys, its endorsement counts only when signed by its one-time key for the
// epoch endorsed, with the path to its root: not by its signing key (which
// may leak once an epoch leaves it out), not by its key of another epoch,
// not by another member's key.
func TestAnEndorsementIsByTheMembersKeyForTheEpoch(t *testing.T) {
	w := newEpochWorld(t)
	ens := make([]*wire.Endorser, 4)
	keys0 := wire.Keyring{Servers: w.keys0, Endorse: make([]*wire.EndorseKeys, 4)}
	for i := range ens {
		var err error
		ens[i], err = wire.NewEndorser(rand.Reader, 1, 4)
		require.NoError(t, err)
		k := ens[i].Keys()
		keys0.Endorse[i] = &k
	}
	s4 := genKey(t).Public
	e4, err := wire.NewEndorser(rand.Reader, 2, 4)
	require.NoError(t, err)
	withKeys := func(m wire.EpochMember, en *wire.Endorser) wire.EpochMember {
		k := en.Keys()
		m.Endorse = &k
		return m
	}
	e1 := sign(t, w.ca, w.body(1, nil, 1, withKeys(member(0, w.keys0[0]), ens[0]), withKeys(member(1, w.keys0[1]), ens[1]),
		withKeys(member(3, w.keys0[3]), ens[3]), withKeys(member(4, s4), e4)))
	chain := func() *wire.Chain { return wire.NewChain(w.ca.Public, 1, keys0) }

	// The members' signing keys: no endorsement at all.
	_, err = chain().Extend(w.endorsedAll(e1))
	require.ErrorIs(t, err, wire.ErrInvalid)

	// Two one-time keys and a signing key: two of q = 3.
	ep := wire.Epoch{Signed: e1}
	for _, id := range []wire.ServerID{0, 1} {
		es, err := ens[id].Sign(w.cluster, id, 1, e1)
		require.NoError(t, err)
		ep.Endorsements = append(ep.Endorsements, es)
	}
	bySigning := w.endorsed(e1).Endorsements[2] // server 2's, by its signing key
	_, err = chain().Extend([]wire.Epoch{{Signed: e1, Endorsements: append(ep.Endorsements[:2:2], bySigning)}})
	require.ErrorIs(t, err, wire.ErrInvalid)

	// Server 3's endorsement of epoch 1 with the path of its key of epoch
	// 2, or server 2's under server 3's name, is no endorsement of server 3.
	spare, err := wire.LoadEndorser(ens[3].Keys(), ens[3].Leaves(), ens[3].State())
	require.NoError(t, err)
	wrongPath, err := spare.Sign(w.cluster, 3, 1, e1)
	require.NoError(t, err)
	of2, err := spare.Sign(w.cluster, 3, 2, e1)
	require.NoError(t, err)
	wrongPath.OneTime.Path = of2.OneTime.Path
	_, err = chain().Extend([]wire.Epoch{{Signed: e1, Endorsements: append(ep.Endorsements[:2:2], wrongPath)}})
	require.ErrorIs(t, err, wire.ErrInvalid)
	stolen, err := ens[2].Sign(w.cluster, 2, 1, e1)
	require.NoError(t, err)
	stolen.Server = 3
	_, err = chain().Extend([]wire.Epoch{{Signed: e1, Endorsements: append(ep.Endorsements[:2:2], stolen)}})
	require.ErrorIs(t, err, wire.ErrInvalid)

	// Server 3's one-time key for epoch 1: q, adopted.
	es3, err := ens[3].Sign(w.cluster, 3, 1, e1)
	require.NoError(t, err)
	c := chain()
	n, err := c.Extend([]wire.Epoch{{Signed: e1, Endorsements: append(ep.Endorsements, es3)}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	k1, _, _ := c.Keyring(1)
	require.Equal(t, e4.Keys(), *k1.EndorseKeysOf(4), "epoch 1's keyring names its members' endorsement keys")
}

// docs/protocol.md change 64: an epoch never changes a member's endorsement
// keys, brings no member in without keys on a cluster whose first members
// have them, and gives a new member keys from the epoch after it joins.
func TestAnEpochKeepsEachMembersEndorsementKeys(t *testing.T) {
	w := newEpochWorld(t)
	keys0 := wire.Keyring{Servers: w.keys0, Endorse: make([]*wire.EndorseKeys, 4)}
	eks := make([]wire.EndorseKeys, 4)
	for i := range 4 {
		en, err := wire.NewEndorser(rand.Reader, 1, 4)
		require.NoError(t, err)
		eks[i] = en.Keys()
		keys0.Endorse[i] = &eks[i]
	}
	kept := func(id wire.ServerID) wire.EpochMember {
		m := member(id, w.keys0[id])
		m.Endorse = &eks[id]
		return m
	}
	fresh := func(first uint64) *wire.EndorseKeys {
		en, err := wire.NewEndorser(rand.Reader, first, 4)
		require.NoError(t, err)
		k := en.Keys()
		return &k
	}
	s4 := member(4, genKey(t).Public)
	c := wire.NewChain(w.ca.Public, 1, keys0)

	changed := kept(1)
	changed.Endorse = fresh(1)
	noKeys := s4
	late := s4
	late.Endorse = fresh(3)
	good := s4
	good.Endorse = fresh(2)
	for name, m := range map[string]wire.EpochMember{"changed": changed, "none": noKeys, "late": late} {
		ms := []wire.EpochMember{kept(0), kept(1), kept(3), good}
		if name == "changed" {
			ms[1] = m
		} else {
			ms[3] = m
		}
		_, err := c.Check(sign(t, w.ca, w.body(1, nil, 1, ms...)))
		require.ErrorIs(t, err, wire.ErrInvalid, name)
	}
	_, err := c.Check(sign(t, w.ca, w.body(1, nil, 1, kept(0), kept(1), kept(3), good)))
	require.NoError(t, err)
}

// docs/protocol.md changes 43 and 64: another epoch with a held number is a
// conflict only if it verifies as that epoch — its CA's signature and q
// endorsements of the epoch before — and the chain then adopts nothing
// more; one that does not verify (a faulty sender's bytes) is refused and
// changes nothing.
func TestAnEpochConflictIsJudgedOnVerifiedEpochs(t *testing.T) {
	w := newEpochWorld(t)
	s4 := genKey(t).Public
	e1 := sign(t, w.ca, w.body(1, nil, 1, member(0, w.keys0[0]), member(1, w.keys0[1]), member(3, w.keys0[3]), member(4, s4)))
	other := sign(t, w.ca, w.body(1, nil, 1, member(0, w.keys0[0]), member(1, w.keys0[1]), member(2, w.keys0[2]), member(5, s4)))
	e2 := sign(t, w.ca, w.body(2, &e1, 1, member(0, w.keys0[0]), member(1, w.keys0[1]), member(3, w.keys0[3]), member(4, s4)))

	c := w.chain()
	_, err := c.Extend(w.endorsedAll(e1))
	require.NoError(t, err)
	unendorsed := wire.Epoch{Signed: other, Endorsements: w.endorsed(other).Endorsements[:2]}
	_, err = c.Extend([]wire.Epoch{unendorsed})
	require.ErrorIs(t, err, wire.ErrInvalid)
	require.NotErrorIs(t, err, wire.ErrEpochConflict, "two endorsements of q prove nothing")
	require.Nil(t, c.Conflict())
	_, err = c.Extend(w.endorsedAll(sign(t, genKey(t), w.body(1, nil, 1, member(0, w.keys0[0]), member(2, w.keys0[2]), member(3, w.keys0[3]), member(4, s4)))))
	require.ErrorIs(t, err, wire.ErrInvalid, "not the CA's")
	require.Nil(t, c.Conflict())

	_, err = c.Extend(w.endorsedAll(other))
	var proof *wire.EpochConflict
	require.ErrorAs(t, err, &proof)
	require.Equal(t, uint64(1), proof.Number)
	require.Equal(t, e1, proof.Held.Signed)
	require.Equal(t, other, proof.Shown.Signed)
	require.Same(t, proof, c.Conflict())
	n, err := c.Extend(w.endorsedAll(e2))
	require.ErrorIs(t, err, wire.ErrEpochConflict, "nothing is adopted past a conflict")
	require.Zero(t, n)
	require.Equal(t, uint64(1), c.Number())
}
