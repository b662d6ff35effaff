package omega

import (
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Newest takes the newest register whose signature verifies, of the
// candidate's own key and lock, from the first proclamations of each reply.
func TestNewest(t *testing.T) {
	cluster := wire.ClusterID{3}
	key, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	other, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	id := wire.ClientID(key.Public.ID)
	const lock = "sched/ω/x"
	reg := func(k *crypto.PrivateKey, lock string, inc, alive uint64) wire.SignedProclamation {
		v, err := crypto.Marshal(Register{Incarnation: inc, Alive: alive, Punish: []uint64{0}})
		require.NoError(t, err)
		p, err := wire.SignProclamation(k, cluster, &wire.ProclamationBody{Lock: lock, Client: wire.ClientID(k.Public.ID),
			Session: 1, Attempt: 1, N: 1, Rev: alive, Value: v})
		require.NoError(t, err)
		return p
	}
	forged := reg(key, lock, 9, 99)
	forged.Signed.Sig[0] ^= 1
	rs := []*wire.StatusReply{
		{Proclamations: []wire.SignedProclamation{reg(key, lock, 1, 5)}},
		{Proclamations: []wire.SignedProclamation{reg(key, lock, 1, 7), forged}},                                                                                         // newest that verifies: 1/7
		{Proclamations: []wire.SignedProclamation{reg(other, lock, 5, 50), reg(key, "other", 5, 50)}},                                                                    // another key, another lock
		{Proclamations: []wire.SignedProclamation{reg(other, lock, 1, 1), reg(other, lock, 1, 2), reg(other, lock, 1, 3), reg(other, lock, 1, 4), reg(key, lock, 2, 1)}}, // fifth: not read
	}
	got := Newest(cluster, id, lock, rs)
	require.NotNil(t, got)
	require.Equal(t, [2]uint64{1, 7}, [2]uint64{got.Incarnation, got.Alive})
	require.Nil(t, Newest(cluster, id, lock, rs[2:3]))
}
