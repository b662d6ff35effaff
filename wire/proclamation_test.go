package wire_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

func TestProclamationVerify(t *testing.T) {
	f := fx(t)
	body := func() *wire.ProclamationBody {
		return &wire.ProclamationBody{Lock: testLock, Client: id(f.carol), Session: 1, Attempt: 9, N: 3, Rev: 1, Value: []byte("leader-a")}
	}
	good, err := wire.SignProclamation(f.carol, f.keys.Cluster, body())
	require.NoError(t, err)
	b, err := good.Verify(f.keys.Cluster)
	require.NoError(t, err)
	require.Equal(t, "leader-a", string(b.Value))
	require.True(t, b.Matches(&wire.Statement{Lock: testLock, Client: id(f.carol), Session: 1, Attempt: 9, Phase: wire.PhaseHeld, N: 3}))
	require.False(t, b.Matches(&wire.Statement{Lock: testLock, Client: id(f.carol), Session: 1, Attempt: 10, Phase: wire.PhaseHeld, N: 3}))

	_, err = good.Verify(wire.ClusterID{1})
	require.ErrorContains(t, err, "cluster")

	// Another client's key cannot sign for carol.
	_, err = wire.SignProclamation(f.bob, f.keys.Cluster, body())
	require.Error(t, err)
	forged := good
	forged.Key = f.bob.Public.Wire
	_, err = forged.Verify(f.keys.Cluster)
	require.ErrorContains(t, err, "signature")
	// A signature for another domain is not a proclamation's.
	raw := body()
	raw.Cluster = f.keys.Cluster
	other, err := crypto.Seal(f.carol, crypto.DomainStatement, raw)
	require.NoError(t, err)
	_, err = (&wire.SignedProclamation{Key: f.carol.Public.Wire, Signed: other}).Verify(f.keys.Cluster)
	require.ErrorContains(t, err, "signature")

	for name, bad := range map[string]func(*wire.ProclamationBody){
		"rev 0":      func(b *wire.ProclamationBody) { b.Rev = 0 },
		"no ticket":  func(b *wire.ProclamationBody) { b.N = 0 },
		"ticket cap": func(b *wire.ProclamationBody) { b.N = wire.TicketCap },
		"oversize":   func(b *wire.ProclamationBody) { b.Value = []byte(strings.Repeat("v", wire.MaxProclaimedValue+1)) },
		"bad lock":   func(b *wire.ProclamationBody) { b.Lock = "" },
	} {
		x := body()
		bad(x)
		_, err := wire.SignProclamation(f.carol, f.keys.Cluster, x)
		require.Error(t, err, name)
		// Signed by hand, past SignProclamation's checks: Verify refuses too.
		x.Cluster = f.keys.Cluster
		s, err := crypto.Seal(f.carol, crypto.DomainProclamation, x)
		require.NoError(t, err)
		_, err = (&wire.SignedProclamation{Key: f.carol.Public.Wire, Signed: s}).Verify(f.keys.Cluster)
		require.Error(t, err, name)
	}
	x := body()
	x.Value = []byte(strings.Repeat("v", wire.MaxProclaimedValue))
	_, err = wire.SignProclamation(f.carol, f.keys.Cluster, x)
	require.NoError(t, err, "a value of exactly the limit")
}
