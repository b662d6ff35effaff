package wire_test

import (
	"errors"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// docs/protocol.md §1, cluster binding: the same client and server keys used with
// a second cluster sign objects that are genuine there and refused here,
// each with an error that names both clusters.
func TestSignedObjectsOfAnotherClusterAreRefused(t *testing.T) {
	f := fx(t)
	other := wire.ClusterIDOf(1, append(append([]*crypto.Parsed(nil), f.keys.Servers...), f.outsider.Public))
	require.NotEqual(t, f.keys.Cluster, other)
	foreign := wire.Keyring{Cluster: other, Servers: f.keys.Servers}
	requireForeign := func(t *testing.T, err error) {
		t.Helper()
		require.True(t, errors.Is(err, wire.ErrForeignCluster), "%v", err)
		require.True(t, errors.Is(err, wire.ErrInvalid), "%v", err)
		require.ErrorContains(t, err, "of cluster "+other.String()+", this is cluster "+f.keys.Cluster.String())
	}

	exit, err := wire.SignStatement(f.alice, other, &wire.Statement{Lock: testLock, Client: id(f.alice), Session: 3, Attempt: 2, Phase: wire.PhaseExit})
	require.NoError(t, err)
	_, err = exit.Verify(other)
	require.NoError(t, err, "genuine in its own cluster")
	_, err = exit.Verify(f.keys.Cluster)
	requireForeign(t, err)

	view, err := wire.SignView(f.servers[1], other, &wire.ViewBody{Lock: testLock, For: id(f.alice), ForSession: 3, ForAttempt: 2, Server: 1})
	require.NoError(t, err)
	_, err = view.Verify(foreign)
	require.NoError(t, err)
	_, err = view.Verify(f.keys)
	requireForeign(t, err)

	cert := wire.ResetCertificate{Client: id(f.alice), Session: 3}
	for s := range f.n {
		v, err := wire.SignSuspect(f.servers[s], other, &wire.SuspectBody{Client: id(f.alice), Session: 3, Server: wire.ServerID(s), Reason: wire.SuspectMute})
		require.NoError(t, err)
		cert.Votes = append(cert.Votes, v)
	}
	require.NoError(t, cert.Verify(foreign, f.q))
	err = cert.Verify(f.keys, f.q)
	requireForeign(t, err)

	// Rewriting the cluster id breaks the signature: it is signed, not a label.
	var body wire.Statement
	require.NoError(t, crypto.Unmarshal(exit.Signed.Body, &body))
	body.Cluster = f.keys.Cluster
	b, err := crypto.Marshal(&body)
	require.NoError(t, err)
	relabelled := exit
	relabelled.Signed.Body = b
	_, err = relabelled.Verify(f.keys.Cluster)
	require.ErrorContains(t, err, "bad signature")
}

// Two clusters of the same keys but another n or f are two clusters.
func TestClusterIDCoversNFAndKeys(t *testing.T) {
	f := fx(t)
	base := wire.ClusterIDOf(1, f.keys.Servers)
	require.Equal(t, base, wire.ClusterIDOf(1, append([]*crypto.Parsed(nil), f.keys.Servers...)), "deterministic")
	require.NotEqual(t, base, wire.ClusterIDOf(0, f.keys.Servers), "f")
	require.NotEqual(t, base, wire.ClusterIDOf(1, f.keys.Servers[:3]), "n")
	swapped := append([]*crypto.Parsed(nil), f.keys.Servers...)
	swapped[0], swapped[1] = swapped[1], swapped[0]
	require.NotEqual(t, base, wire.ClusterIDOf(1, swapped), "order of ids")
	replaced := append([]*crypto.Parsed(nil), f.keys.Servers...)
	replaced[3] = f.outsider.Public
	require.NotEqual(t, base, wire.ClusterIDOf(1, replaced), "a key")
}
