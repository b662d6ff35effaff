package wire_test

import (
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// A Preverifier decides nothing: a statement or View it saw verifies, or is
// refused, exactly as one it did not see; what it checked, the core's check
// finds remembered.
func TestPreverifyDecidesNothing(t *testing.T) {
	f := fx(t)
	good := f.stmt(t, f.alice, wire.PhaseDoorway, 91, 1, 0, nil)
	forged := f.stmt(t, f.alice, wire.PhaseDoorway, 91, 2, 0, nil)
	forged.Signed.Sig = append([]byte(nil), forged.Signed.Sig...)
	forged.Signed.Sig[3] ^= 0x40
	stolen := f.stmt(t, f.bob, wire.PhaseDoorway, 91, 3, 0, nil)
	stolen.Key = f.alice.Public.Wire // bob's signature under alice's key
	j := f.justification(t, f.carol, 92, 1)
	badView := f.view(t, 1, f.carol, 92, 2)
	badView.Signed.Sig = append([]byte(nil), badView.Signed.Sig...)
	badView.Signed.Sig[0] ^= 1
	p := &wire.Preverifier{Keys: &f.keys, Self: 0}
	for _, m := range []*wire.Message{
		{Submit: &wire.Submit{Req: 1, Statement: good, J: j}},
		{Forward: &wire.Forward{Statement: good, J: []wire.SignedView{badView}}},
		{Submit: &wire.Submit{Req: 2, Statement: forged}},
		{Forward: &wire.Forward{Statement: stolen}},
		{Submit: &wire.Submit{Req: 3, Statement: wire.SignedStatement{Key: crypto.PublicKey{Scheme: "none"}}, J: []wire.SignedView{{Server: 99}}}},
		{Ack: &wire.Ack{Req: 4}},
	} {
		require.NotPanics(t, func() { p.Check(m); (&wire.Preverifier{}).Check(m) })
	}
	hits := crypto.VerdictHits()
	_, err := good.Verify(testCluster())
	require.NoError(t, err)
	require.Greater(t, crypto.VerdictHits(), hits, "the core's check of a preverified statement is remembered")
	for _, v := range j {
		hits = crypto.VerdictHits()
		_, err := v.Verify(f.keys)
		require.NoError(t, err)
		if v.Server == 0 {
			require.Equal(t, hits, crypto.VerdictHits(), "a server's own Views are not checked ahead (its core knows them by their bytes)")
		} else {
			require.Greater(t, crypto.VerdictHits(), hits, "a preverified View of server %s", v.Server)
		}
	}
	_, err = forged.Verify(testCluster())
	require.Error(t, err)
	_, err = stolen.Verify(testCluster())
	require.Error(t, err)
	_, err = badView.Verify(f.keys)
	require.Error(t, err)
}
