package crypto

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A remembered verdict is only ever the verdict on the same domain, key, body
// and signature: changing any one of them is decided afresh.
func TestVerdictMemoNeverChangesAVerdict(t *testing.T) {
	for _, scheme := range Schemes() {
		k, err := GenerateKey(scheme, rand.Reader)
		require.NoError(t, err)
		other, err := GenerateKey(scheme, rand.Reader)
		require.NoError(t, err)
		body := []byte("a statement body")
		sig := k.Sign(DomainStatement, body)
		for range 2 { // the second round answers from the memo
			require.True(t, k.Public.Verify(DomainStatement, body, sig))
			require.False(t, k.Public.Verify(DomainView, body, sig), "another domain")
			require.False(t, other.Public.Verify(DomainStatement, body, sig), "another key")
			require.False(t, k.Public.Verify(DomainStatement, append(body, 0), sig), "another body")
			flipped := append([]byte(nil), sig...)
			flipped[len(flipped)-1] ^= 1
			require.False(t, k.Public.Verify(DomainStatement, body, flipped), "another signature")
		}
		hits := VerdictHits()
		require.True(t, k.Public.Verify(DomainStatement, body, sig))
		require.Greater(t, VerdictHits(), hits, "%s: a verdict reached before is remembered", scheme)
	}
}

// The memo holds at most two generations whatever number of verdicts arrives.
func TestVerdictMemoIsBounded(t *testing.T) {
	m := newVerdictMemo()
	var k [32]byte
	for i := 0; i < 3*verdictGeneration+7; i++ {
		k[0], k[1], k[2] = byte(i), byte(i>>8), byte(i>>16)
		m.put(k, i%2 == 0)
		cur, old := m.lens()
		require.LessOrEqual(t, cur, verdictGeneration)
		require.LessOrEqual(t, old, verdictGeneration)
	}
	v, ok := m.get(k)
	require.True(t, ok)
	require.Equal(t, (3*verdictGeneration+6)%2 == 0, v)
}

// What is not used again within two ages is let go; what is used stays.
func TestCachesAgeAway(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := newVerdictMemo()
	c := newKeyCache()
	var hot, cold [32]byte
	hot[0], cold[0] = 1, 2
	hot[1], cold[1] = 9, 9
	m.put(hot, true)
	m.put(cold, false)
	c.get(hot)
	c.get(cold)
	m.age(t0)
	c.age(t0)
	m.age(t0.Add(cacheAge / 2)) // too early: nothing moves
	_, old := m.lens()
	require.Equal(t, 2, old)
	_, ok := m.get(hot) // used: back in the current generation
	require.True(t, ok)
	c.get(hot)
	m.age(t0.Add(cacheAge))
	c.age(t0.Add(cacheAge))
	_, ok = m.get(cold)
	require.False(t, ok, "a verdict not used for two ages is let go")
	_, ok = m.get(hot)
	require.True(t, ok, "a verdict used within an age stays")
	misses := c.misses.Load()
	c.get(hot)
	require.Equal(t, misses, c.misses.Load(), "a key used within an age stays")
	c.get(cold)
	require.Equal(t, misses+1, c.misses.Load(), "a key not used for two ages is expanded again")
	for i := 2; i < 5; i++ {
		m.age(t0.Add(time.Duration(i) * cacheAge))
		c.age(t0.Add(time.Duration(i) * cacheAge))
	}
	for _, lens := range [][2]int{pair(m.lens()), pair(c.lens())} {
		require.Equal(t, [2]int{0, 0}, lens, "nothing left two ages after the last use")
	}
}

func pair(a, b int) [2]int { return [2]int{a, b} }
