package core

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// The verify cache holds at most about its size, and nothing two ages
// after traffic stops: a flood's statements do not stay in memory.
func TestVerifyCacheBoundedAndAged(t *testing.T) {
	c := newVerifyCache(100)
	t0 := time.Unix(1000, 0)
	c.age(t0)
	st := &wire.Statement{}
	for i := range 1000 {
		c.put(wire.Digest{byte(i), byte(i >> 8)}, st)
		require.LessOrEqual(t, len(c.cur)+len(c.old), 100)
	}
	_, ok := c.get(wire.Digest{0xe7, 0x03})
	require.True(t, ok, "the newest entry is kept")
	c.age(t0.Add(verifyCacheAge))
	_, ok = c.get(wire.Digest{0xe7, 0x03})
	require.True(t, ok, "one age later it is still there")
	c.age(t0.Add(2 * verifyCacheAge))
	require.Zero(t, len(c.cur)+len(c.old), "two ages later the cache is empty")
}

// A server takes its own View inside a Ticket's J from what it signed,
// without checking its signature again; a View that only claims to be its
// own (other bytes) is checked, and refused.
func TestOwnViewInJNotVerifiedAgain(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	j := c.doorway(cl, "L", 1, 1)
	own := -1
	for i, v := range j {
		if v.Server == 0 {
			own = i
		}
	}
	require.NotEqual(t, -1, own, "J holds server 0's View")
	k := c.cores[0]
	body, err := k.verifyView(&j[own])
	require.NoError(t, err)
	require.Equal(t, wire.ServerID(0), body.Server)
	hits := k.Stats.CacheHits
	_, err = k.verifyView(&j[own])
	require.NoError(t, err)
	require.Equal(t, hits+1, k.Stats.CacheHits, "known by its bytes")

	forged := j[own]
	forged.Signed.Sig = bytes.Clone(forged.Signed.Sig)
	forged.Signed.Sig[0] ^= 0xff
	_, err = k.verifyView(&forged)
	require.Error(t, err, "claims server 0, not its bytes: checked")
	other := (own + 1) % len(j)
	hits = k.Stats.CacheHits
	_, err = k.verifyView(&j[other])
	require.NoError(t, err)
	require.Equal(t, hits, k.Stats.CacheHits, "another server's View is verified")

	tk := cl.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	require.True(t, isMember(k, "L", cl.id))
	require.Equal(t, wire.PhaseTicket, k.Register("L", cl.id).Phase, "the Ticket with its J is accepted")
}
