package detector

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// A client with nothing left but its certificate keeps it for
// CertRetention, then only the session it ended (change 26): its old
// sessions stay refused, votes on them are dropped, a compacted client
// touched again is compacted again, and a late vote is answered with a
// vote of this server's own.
func TestSettledClientsCompacted(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	m := f.dets[0]
	t0 := time.Unix(1000, 0)
	c := wire.ClientID{5}
	require.NoError(t, m.Observe(c, 3, t0))
	cert := &wire.ResetCertificate{Client: c, Session: 3}
	for s := range 3 {
		v, err := wire.SignSuspect(f.signers[s], f.keys.Cluster, &wire.SuspectBody{Client: c, Session: 3, Server: wire.ServerID(s), Reason: wire.SuspectMute})
		require.NoError(t, err)
		cert.Votes = append(cert.Votes, v)
	}
	fresh, err := m.ApplyCertificate(cert)
	require.NoError(t, err)
	require.True(t, fresh)
	m.Tick(t0)
	require.Empty(t, m.Compact(t0.Add(m.cfg.CertRetention-time.Millisecond)), "kept for the retention")
	require.NotNil(t, m.Certificate(c))
	require.Equal(t, []Settled{{Client: c, UpTo: 3}}, m.Compact(t0.Add(m.cfg.CertRetention)))
	require.NotContains(t, m.clients, c)
	require.Nil(t, m.Certificate(c))
	require.Equal(t, uint64(3), m.ResetUpTo(c), "its sessions stay refused")
	require.ErrorIs(t, m.Observe(c, 2, t0), ErrSessionReset)

	late, err := wire.SignSuspect(f.signers[3], f.keys.Cluster, &wire.SuspectBody{Client: c, Session: 3, Server: 3, Reason: wire.SuspectMute})
	require.NoError(t, err)
	added, _, err := m.AddVote(late)
	require.NoError(t, err)
	require.False(t, added, "a vote on a settled session is dropped")
	v, ok := m.SignSettled(c, 3)
	require.True(t, ok)
	body, err := v.Verify(f.keys)
	require.NoError(t, err)
	require.Equal(t, uint64(3), body.Session)
	_, ok = m.SignSettled(c, 4)
	require.False(t, ok, "never a vote on a session no certificate ended")

	// Touched again (a heartbeat of an old session), it settles again.
	require.Error(t, m.Heartbeat(c, 3, t0.Add(time.Minute)))
	m.Tick(t0.Add(time.Minute))
	require.Equal(t, []Settled{{Client: c, UpTo: 3}}, m.Compact(t0.Add(time.Minute+m.cfg.CertRetention)))
	require.Empty(t, m.clients)
}
