package detector

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// A faulty server voting on made-up clients makes a correct one keep at most
// MaxVoteOnly of them (change 25); a client this server knows otherwise is
// never forgotten for it.
func TestVoteOnlyClientsBounded(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	m := f.dets[0]
	m.cfg.MaxVoteOnly = 10
	known := wire.ClientID{0xff}
	require.NoError(t, m.Observe(known, 1, time.Unix(1000, 0)))
	vote := func(c wire.ClientID) wire.SignedSuspect {
		v, err := wire.SignSuspect(f.signers[1], f.keys.Cluster, &wire.SuspectBody{Client: c, Session: 1, Server: 1, Reason: wire.SuspectMute})
		require.NoError(t, err)
		return v
	}
	_, _, err := m.AddVote(vote(known))
	require.NoError(t, err)
	for i := range 100 {
		_, _, err := m.AddVote(vote(wire.ClientID{byte(i), 1}))
		require.NoError(t, err)
		require.LessOrEqual(t, len(m.clients), 10+1)
	}
	require.Equal(t, 1, m.VoteCount(known, 1), "the known client keeps its vote")
	require.Equal(t, 1, m.VoteCount(wire.ClientID{99, 1}, 1), "the newest made-up client is kept")
	require.Zero(t, m.VoteCount(wire.ClientID{0, 1}, 1), "the oldest is forgotten")
}

// A Tick looks only at clients with something that runs out (or touched
// since the last Tick): its cost does not grow with the clients ever seen.
func TestTickLooksAtLiveClientsOnly(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	m := f.dets[0]
	t0 := time.Unix(1000, 0)
	for i := range 1000 {
		c := wire.ClientID{byte(i), byte(i >> 8)}
		require.NoError(t, m.Observe(c, 1, t0))
		cert := &wire.ResetCertificate{Client: c, Session: 1}
		for s := range 3 {
			v, err := wire.SignSuspect(f.signers[s], f.keys.Cluster, &wire.SuspectBody{Client: c, Session: 1, Server: wire.ServerID(s), Reason: wire.SuspectMute})
			require.NoError(t, err)
			cert.Votes = append(cert.Votes, v)
		}
		_, err := m.ApplyCertificate(cert)
		require.NoError(t, err)
	}
	live := wire.ClientID{0xee, 0xee, 0xee}
	require.NoError(t, m.Observe(live, 1, t0))
	m.Tick(t0)
	require.Equal(t, 1001, len(m.clients), "every client's certificate is kept")
	require.Equal(t, 1, len(m.live))
	require.Contains(t, m.live, live)
	require.Len(t, m.Tick(t0.Add(2*time.Second)), 1, "the live lease still runs out and is voted on")
}

// A faulty server voting on session after session of a client (a revoked
// one opens many and gets no lease) cannot push out the votes gathering on
// the session this server knows: the certificate on it still forms
// (found by the simulator, seed 846).
func TestPendingVotesKeepKnownSessions(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	m := f.dets[0]
	c := wire.ClientID{6}
	require.NoError(t, m.Observe(c, 1, time.Unix(1000, 0)))
	vote := func(s int, sess uint64) wire.SignedSuspect {
		v, err := wire.SignSuspect(f.signers[s], f.keys.Cluster, &wire.SuspectBody{Client: c, Session: sess, Server: wire.ServerID(s), Reason: wire.SuspectMute})
		require.NoError(t, err)
		return v
	}
	_, _, err := m.AddVote(vote(1, 1))
	require.NoError(t, err)
	for sess := uint64(2); sess < 40; sess++ {
		_, _, err := m.AddVote(vote(3, sess)) // the faulty server
		require.NoError(t, err)
	}
	_, cert, err := m.AddVote(vote(2, 1))
	require.NoError(t, err)
	require.Nil(t, cert)
	_, cert, err = m.AddVote(vote(0, 1))
	require.NoError(t, err)
	require.NotNil(t, cert, "the known session's votes were kept")
	require.LessOrEqual(t, len(m.clients[c].votes), m.cfg.MaxPendingVotes)
}
