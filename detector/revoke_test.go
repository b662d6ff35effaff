package detector

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// A revoked client's leases are not renewed, and each is voted on when it
// runs out — not before: the client's own lease check must see the loss
// first (docs/protocol.md change 23, §5).
func TestRevokedLeasesRunOutAndAreVotedOn(t *testing.T) {
	m := newFixture(t, 4, 3, 5*time.Second).dets[0]
	c := wire.ClientID{9}
	t0 := time.Unix(1000, 0)
	ttl := 2 * time.Second
	_, err := m.Open(c, 1, ttl, t0)
	require.NoError(t, err)
	require.NoError(t, m.Heartbeat(c, 1, t0.Add(time.Second)))

	m.Revoke(c)
	require.ErrorIs(t, m.Heartbeat(c, 1, t0.Add(1500*time.Millisecond)), ErrRevoked)
	_, err = m.Open(c, 2, ttl, t0.Add(1500*time.Millisecond))
	require.ErrorIs(t, err, ErrRevoked)
	require.False(t, m.LeaseOK(c, 1, t0.Add(1500*time.Millisecond)))

	// No vote while the lease the client was last granted lives.
	require.Empty(t, m.Tick(t0.Add(2900*time.Millisecond)))
	votes := m.Tick(t0.Add(3 * time.Second))
	require.Len(t, votes, 1)

	// A session first seen in a forwarded statement after the revocation
	// is refused from the start, and voted on when its lease runs out.
	require.NoError(t, m.Observe(c, 3, t0.Add(3*time.Second)))
	require.False(t, m.LeaseOK(c, 3, t0.Add(3*time.Second)))
	require.Empty(t, m.Tick(t0.Add(3*time.Second+m.cfg.DefaultTTL-time.Millisecond)))
	require.Len(t, m.Tick(t0.Add(3*time.Second+m.cfg.DefaultTTL)), 1)
}
