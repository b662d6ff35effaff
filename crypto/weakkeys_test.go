package crypto

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// For a small-order key circl accepts R = identity, S = 0 on every message:
// such keys must never parse.
func TestWeakEd25519KeysRefused(t *testing.T) {
	forged := make([]byte, 64)
	forged[0] = 1 // R = identity, S = 0
	for _, k := range smallOrderEd25519 {
		_, err := PublicKey{Scheme: Ed25519, Key: k}.Parse()
		require.ErrorIs(t, err, errWeakKey, hex.EncodeToString(k))
	}
	for _, h := range []string{
		"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p
		"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff", // y = p+1, sign set
		"0100000000000000000000000000000000000000000000000000000000000080", // identity, x sign set
	} {
		b, _ := hex.DecodeString(h)
		_, err := PublicKey{Scheme: Ed25519, Key: b}.Parse()
		require.ErrorIs(t, err, errWeakKey, h)
	}
	// Real keys still parse and verify.
	k, err := PrivateKeyFromSeed(Ed25519, make([]byte, 32))
	require.NoError(t, err)
	p, err := k.Public.Wire.Parse()
	require.NoError(t, err)
	require.True(t, p.Verify(DomainTest, []byte("x"), k.Sign(DomainTest, []byte("x"))))
	require.False(t, p.Verify(DomainTest, []byte("x"), forged))
}

func TestPublicKeyStringIsStrict(t *testing.T) {
	k, err := PrivateKeyFromSeed(Ed25519, make([]byte, 32))
	require.NoError(t, err)
	s := k.Public.Wire.String()
	_, err = ParsePublicKeyString(s)
	require.NoError(t, err)
	_, err = ParsePublicKeyString(s[:20] + "\n" + s[20:])
	require.Error(t, err, "embedded newlines make a second spelling of one key")
}
