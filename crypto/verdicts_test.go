package crypto

import (
	"crypto/rand"
	"testing"

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
	m := &verdictMemo{}
	var k [32]byte
	for i := 0; i < 3*verdictGeneration+7; i++ {
		k[0], k[1], k[2] = byte(i), byte(i>>8), byte(i>>16)
		m.put(k, i%2 == 0)
		require.LessOrEqual(t, len(m.cur), verdictGeneration)
		require.LessOrEqual(t, len(m.old), verdictGeneration)
	}
	v, ok := m.get(k)
	require.True(t, ok)
	require.Equal(t, (3*verdictGeneration+6)%2 == 0, v)
}
