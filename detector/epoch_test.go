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

// docs/protocol.md change 43, the copy's end: votes of the old epoch that
// no certificate used are dropped, but this server's own are signed again
// in the new epoch — their sessions stay suspected (no ack for them here,
// as promised at the first vote), so without new votes no certificate of
// the new epoch would ever end them (found by the campaign, seeds 8400219,
// 8400197, 8400042). Votes of the new epoch make its certificate.
func TestCopyEndSignsOwnVotesAgainInTheNewEpoch(t *testing.T) {
	const n, q = 4, 3
	ttl := time.Second
	f := newFixture(t, n, q, ttl)
	c := clientID(t)
	t0 := time.Unix(0, 0)
	for s := range n {
		mustOpen(t, f.dets[s], c, 1, ttl, t0)
	}
	var votes []wire.SignedSuspect
	for s := range 2 { // two votes of epoch 0: no certificate
		votes = append(votes, f.dets[s].Tick(t0.Add(3*ttl))...)
	}
	require.Len(t, votes, 2)
	require.Empty(t, f.gossip(t, votes))

	next := f.keys
	next.Epoch = 1
	var revotes []wire.SignedSuspect
	for s := range n {
		revoted := f.dets[s].SetEpoch(next, q)
		if s >= 2 {
			require.Empty(t, revoted, "server %d had no vote of its own", s)
			require.Zero(t, f.dets[s].VoteCount(c, 1), "server %d dropped the votes of epoch 0", s)
			continue
		}
		require.Len(t, revoted, 1, "server %d signs its vote again", s)
		body, err := revoted[0].Verify(next)
		require.NoError(t, err)
		require.Equal(t, [2]uint64{1, 1}, [2]uint64{body.Epoch, body.Session})
		require.Equal(t, wire.ServerID(s), body.Server)
		require.Equal(t, 1, f.dets[s].VoteCount(c, 1))
		revotes = append(revotes, revoted...)
	}
	require.Error(t, f.dets[0].Heartbeat(c, 1, t0.Add(3*ttl)), "the session stays suspected")
	f.keys = next
	third := f.dets[2].Tick(t0.Add(3 * ttl))
	require.Len(t, third, 1, "server 2's lease ran out: it votes in epoch 1")
	certs := f.gossip(t, append(revotes, third...))
	require.NotEmpty(t, certs, "q votes of epoch 1: a certificate ends the session")
	require.NoError(t, certs[0].Verify(next, q))
}
