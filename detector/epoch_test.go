package detector

import (
	"testing"
	"time"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// docs/protocol.md change 43: a detector votes in its epoch, and votes of
// another epoch — genuine ones, by the same keys — are no votes here: they
// make no certificate, and they are no evidence against their signer.
func TestVotesAreCastAndCountedInTheDetectorsEpoch(t *testing.T) {
	const n, q, e = 4, 3, 2
	ttl := time.Second
	f := newFixtureIn(t, e, n, q, ttl)
	c := clientID(t)
	t0 := time.Unix(0, 0)
	for s := range n {
		mustOpen(t, f.dets[s], c, 1, ttl, t0)
	}
	var votes []wire.SignedSuspect
	for now := t0; len(votes) < n && now.Before(t0.Add(10*ttl)); now = now.Add(ttl / 4) {
		for s := range n {
			votes = append(votes, f.dets[s].Tick(now)...)
		}
	}
	require.Len(t, votes, n, "every detector voted on the silent session")
	for _, v := range votes {
		body, err := v.Verify(f.keys)
		require.NoError(t, err)
		require.EqualValues(t, e, body.Epoch, "a vote names its signer's epoch")
	}

	// The same keys' votes of epoch 0 count for nothing in epoch 2.
	other := clientID(t)
	for s := range n {
		old, err := wire.SignSuspect(f.signers[s], f.keys.Cluster, &wire.SuspectBody{Client: other, Session: 1, Server: wire.ServerID(s), Reason: wire.SuspectMute})
		require.NoError(t, err)
		_, cert, err := f.dets[0].AddVote(old)
		require.ErrorIs(t, err, wire.ErrOtherEpoch)
		require.Nil(t, cert)
	}
	require.Zero(t, f.dets[0].ResetUpTo(other))
}
