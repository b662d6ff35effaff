package server

import (
	"crypto/rand"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// A client's connection has its statements checked ahead at most at
// client_rate (burst client_burst); a server's, all of them.
func TestPreverifyKeepsToTheClientRate(t *testing.T) {
	ck, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	id := wire.ClientID(ck.Public.ID)
	var cluster wire.ClusterID
	cluster[0] = 7
	s := &Server{clientRate: 0.001, clientBurst: 3} // no refill within the test
	s.preverifier.Store(&wire.Preverifier{})
	for _, tc := range []struct {
		from transport.Peer
		want int
	}{
		{wire.ClientPeer(id), 3},
		{wire.ServerPeer(1), 10},
	} {
		check := s.preverifyFor(tc.from)
		var sts []wire.SignedStatement
		for i := range 10 {
			ss, err := wire.SignStatement(ck, cluster, &wire.Statement{Lock: "L", Client: id, Session: 1, Attempt: uint64(i + 1), Phase: wire.PhaseDoorway})
			require.NoError(t, err)
			sts = append(sts, ss)
			check(&wire.Message{Submit: &wire.Submit{Req: uint64(i), Statement: ss}})
		}
		ahead := 0
		for _, ss := range sts {
			hits := crypto.VerdictHits()
			_, err := ss.Verify(cluster)
			require.NoError(t, err)
			if crypto.VerdictHits() > hits {
				ahead++
			}
		}
		require.Equal(t, tc.want, ahead, "statements of %s checked ahead", tc.from)
		ck, err = crypto.GenerateKey(crypto.Ed25519, rand.Reader) // fresh statements for the next case
		require.NoError(t, err)
		id = wire.ClientID(ck.Public.ID)
	}
}

// clientRateOf reads the settings the core gets.
func TestClientRateOfSettings(t *testing.T) {
	r, b := clientRateOf(nil)
	require.Equal(t, 1000.0, r)
	require.Equal(t, 2000, b)
}
