package crypto_test

import (
	"math/rand/v2"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine is left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testKey derives a key of scheme deterministically from label, so tests and
// their failures replay exactly.
func testKey(tb testing.TB, scheme string, label uint64) *crypto.PrivateKey {
	tb.Helper()
	var seed [32]byte
	seed[0] = byte(label)
	seed[1] = byte(label >> 8)
	k, err := crypto.GenerateKey(scheme, rand.NewChaCha8(seed))
	require.NoError(tb, err)
	return k
}
