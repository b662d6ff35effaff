package wire_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// docs/protocol.md change 49: an epoch counts only with the cluster CA's
// signature and the endorsements of q members of the epoch before, each
// counted once and only for that epoch: the CA's key alone makes nothing a
// server or client adopts, and endorsements of another epoch, of another
// number, by a server that is no member of the epoch before, or repeated,
// add nothing.
func TestEpochNeedsQEndorsementsOfTheEpochBefore(t *testing.T) {
	w := newEpochWorld(t)
	k4 := genKey(t)
	members := []wire.EpochMember{member(0, w.keys0[0]), member(1, w.keys0[1]), member(3, w.keys0[3]), member(4, k4.Public)}
	e1 := sign(t, w.ca, w.body(1, nil, 1, members...))
	other := sign(t, w.ca, w.body(1, nil, 1, member(0, w.keys0[0]), member(1, w.keys0[1]), member(2, w.keys0[2]), member(4, k4.Public)))
	by := func(s crypto.Signed, n uint64, k *crypto.PrivateKey, id wire.ServerID) wire.SignedEndorsement {
		es, err := wire.SignEndorsement(k, w.cluster, id, n, s)
		require.NoError(t, err)
		return es
	}
	adopt := func(es ...wire.SignedEndorsement) error {
		_, err := w.chain().Extend([]wire.Epoch{{Signed: e1, Endorsements: es}})
		return err
	}
	require.ErrorContains(t, adopt(), "endorsed by 0 members of epoch 0, it needs 3", "the CA's signature alone")
	require.ErrorContains(t, adopt(by(e1, 1, w.privs[0], 0), by(e1, 1, w.privs[1], 1)), "endorsed by 2 members")
	require.ErrorContains(t, adopt(by(e1, 1, w.privs[0], 0), by(e1, 1, w.privs[1], 1), by(e1, 1, k4, 4)), "endorsed by 2 members", "a new member is no member of the epoch before")
	require.ErrorContains(t, adopt(by(e1, 1, w.privs[0], 0), by(e1, 1, w.privs[1], 1), by(e1, 1, w.privs[1], 1)), "endorsed by 2 members", "one member counts once")
	require.ErrorContains(t, adopt(by(e1, 1, w.privs[0], 0), by(e1, 1, w.privs[1], 1), by(other, 1, w.privs[2], 2)), "endorsed by 2 members", "an endorsement of another epoch 1")
	require.ErrorContains(t, adopt(by(e1, 1, w.privs[0], 0), by(e1, 1, w.privs[1], 1), by(e1, 2, w.privs[2], 2)), "endorsed by 2 members", "an endorsement of another number")
	forged := by(e1, 1, genKey(t), 2)
	require.ErrorContains(t, adopt(by(e1, 1, w.privs[0], 0), by(e1, 1, w.privs[1], 1), forged), "endorsed by 2 members", "a signature not the member's")
	require.NoError(t, adopt(by(e1, 1, w.privs[0], 0), by(e1, 1, w.privs[1], 1), by(e1, 1, w.privs[2], 2)))

	// Check verifies the CA's signature and the chain's rules alone: what a
	// member checks before it endorses.
	c := w.chain()
	b, err := c.Check(e1)
	require.NoError(t, err)
	require.Equal(t, uint64(1), b.Number)
	require.Zero(t, c.Number(), "Check adopts nothing")
	_, err = c.Check(sign(t, genKey(t), w.body(1, nil, 1, members...)))
	require.ErrorContains(t, err, "not signed by the cluster CA")

	// A member's signature binds its id.
	es := by(e1, 1, w.privs[0], 0)
	es.Server = 1
	_, err = es.Verify(wire.Keyring{Cluster: w.cluster, Servers: w.keys0})
	require.ErrorIs(t, err, wire.ErrInvalid)
	es = by(e1, 1, w.privs[0], 0)
	_, err = es.Verify(wire.Keyring{Cluster: wire.ClusterID{1}, Servers: w.keys0})
	require.ErrorIs(t, err, wire.ErrForeignCluster)
}

// The operator's approval (change 49): a client CA in force signed it, for
// this cluster, this number and this epoch's bytes.
func TestApprovalBindsTheEpoch(t *testing.T) {
	w := newEpochWorld(t)
	cca, other := genKey(t), genKey(t)
	e1 := sign(t, w.ca, w.body(1, nil, 1, member(0, w.keys0[0]), member(1, w.keys0[1]), member(2, w.keys0[2]), member(3, w.keys0[3])))
	e1b := sign(t, w.ca, w.body(1, nil, 1, member(0, w.keys0[0]), member(1, w.keys0[1]), member(2, w.keys0[2]), member(4, genKey(t).Public)))
	a, err := wire.SignApproval(cca, w.cluster, 1, e1)
	require.NoError(t, err)
	cas := []*crypto.Parsed{other.Public, cca.Public}
	require.NoError(t, wire.VerifyApproval(cas, w.cluster, 1, e1, &a))
	require.ErrorIs(t, wire.VerifyApproval(cas, w.cluster, 1, e1, nil), wire.ErrNotApproved)
	require.ErrorIs(t, wire.VerifyApproval([]*crypto.Parsed{other.Public}, w.cluster, 1, e1, &a), wire.ErrNotApproved, "by a CA not in force")
	require.ErrorIs(t, wire.VerifyApproval(cas, w.cluster, 1, e1b, &a), wire.ErrNotApproved, "of another epoch")
	require.ErrorIs(t, wire.VerifyApproval(cas, w.cluster, 2, e1, &a), wire.ErrNotApproved, "of another number")
	require.ErrorIs(t, wire.VerifyApproval(cas, wire.ClusterID{9}, 1, e1, &a), wire.ErrNotApproved, "of another cluster")
}
