package wire_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// The decoders' binding rules, on every signed object that names its
// signer (docs/protocol.md §1, changes 30, 48, 49): a body that names one
// client or server but is signed — validly — by another's key is refused,
// and so is one of another cluster. Each case is the object as a faulty
// peer would build it, one rule broken; beside it the genuine one verifies.
func TestEveryDecoderBindsItsSignerAndCluster(t *testing.T) {
	f := fx(t)
	other := wire.ClusterIDOf(1, append(append([]*crypto.Parsed(nil), f.keys.Servers...), f.outsider.Public))
	seal := func(k *crypto.PrivateKey, d crypto.Domain, body any) crypto.Signed {
		s, err := crypto.Seal(k, d, body)
		require.NoError(t, err)
		return s
	}
	proclamation := func(signer *crypto.PrivateKey, client wire.ClientID, cluster wire.ClusterID) error {
		p := wire.SignedProclamation{Key: signer.Public.Wire, Signed: seal(signer, crypto.DomainProclamation,
			&wire.ProclamationBody{Cluster: cluster, Lock: testLock, Client: client, Session: 3, Attempt: 1, N: 7, Rev: 1, Value: []byte("10.0.0.1")})}
		_, err := p.Verify(f.keys.Cluster)
		if err == nil {
			_, err = p.DecodeVouched(f.keys.Cluster) // f+1 servers' bytes: every check but the signature's
		}
		return err
	}
	open := func(signer *crypto.PrivateKey, client wire.ClientID, cluster wire.ClusterID) error {
		o := wire.SignedOpen{Key: signer.Public.Wire, Signed: seal(signer, crypto.DomainSession,
			&wire.SessionOpenBody{Cluster: cluster, Client: client, Session: 3, TTLMillis: 5000})}
		_, err := o.Verify(f.keys.Cluster)
		return err
	}
	endorsement := func(signer int, claims wire.ServerID, cluster wire.ClusterID) error {
		e := wire.SignedEndorsement{Server: wire.ServerID(signer), Signed: seal(f.servers[signer], crypto.DomainEndorsement,
			&wire.EndorsementBody{Cluster: cluster, Number: 1, Server: claims})}
		_, err := e.Verify(f.keys)
		return err
	}
	refused := func(t *testing.T, err error, says string) {
		t.Helper()
		require.Error(t, err)
		require.True(t, errors.Is(err, wire.ErrInvalid), "%v", err)
		require.ErrorContains(t, err, says)
	}

	t.Run("proclamation", func(t *testing.T) {
		require.NoError(t, proclamation(f.alice, id(f.alice), f.keys.Cluster))
		refused(t, proclamation(f.bob, id(f.alice), f.keys.Cluster), "proclamation of "+id(f.alice).String()+" signed by key of "+id(f.bob).String())
		refused(t, proclamation(f.alice, id(f.alice), other), "of cluster "+other.String())
	})
	t.Run("session open", func(t *testing.T) {
		require.NoError(t, open(f.alice, id(f.alice), f.keys.Cluster))
		refused(t, open(f.bob, id(f.alice), f.keys.Cluster), "session open of "+id(f.alice).String()+" signed by key of "+id(f.bob).String())
		refused(t, open(f.alice, id(f.alice), other), "of cluster "+other.String())
	})
	t.Run("endorsement", func(t *testing.T) {
		require.NoError(t, endorsement(1, 1, f.keys.Cluster))
		refused(t, endorsement(1, 2, f.keys.Cluster), "endorsement claims server s2 but is signed by s1")
		refused(t, endorsement(1, 1, other), "of cluster "+other.String())
	})
}
