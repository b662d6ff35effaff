package core

import (
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
