package crypto_test

import (
	"bytes"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/stretchr/testify/require"
)

func TestSealOpenRoundTrip(t *testing.T) {
	for _, scheme := range crypto.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			k := testKey(t, scheme, 20)
			in := rec{A: 7, B: "lock", C: []uint64{1, 2, 3}}
			s, err := crypto.Seal(k, crypto.DomainStatement, in)
			require.NoError(t, err)
			canon, err := crypto.Marshal(in)
			require.NoError(t, err)
			require.Equal(t, canon, s.Body, "Seal signs the deterministic encoding")

			var out rec
			require.NoError(t, crypto.Open(k.Public, crypto.DomainStatement, s, &out))
			require.Equal(t, in, out)

			// Wrong domain, wrong key, tampered body.
			require.ErrorIs(t, crypto.Open(k.Public, crypto.DomainView, s, &out), crypto.ErrBadSignature)
			require.ErrorIs(t, crypto.Open(testKey(t, scheme, 21).Public, crypto.DomainStatement, s, &out), crypto.ErrBadSignature)
			tampered := crypto.Signed{Body: bytes.Clone(s.Body), Sig: s.Sig}
			tampered.Body[len(tampered.Body)-1] ^= 1
			require.ErrorIs(t, crypto.Open(k.Public, crypto.DomainStatement, tampered, &out), crypto.ErrBadSignature)
			require.ErrorIs(t, crypto.Open(k.Public, crypto.DomainStatement, crypto.Signed{Body: s.Body}, &out), crypto.ErrBadSignature)
		})
	}
}

// Open verifies before it decodes: a body that would not even decode, under a
// bad signature, is reported as a bad signature (the decoder never sees it).
func TestOpenVerifiesBeforeDecoding(t *testing.T) {
	k := testKey(t, crypto.Ed25519, 22)
	garbage := unhex(t, "bf bf bf ff") // indefinite lengths, truncated: never decodes
	sig := k.Sign(crypto.DomainTest, []byte("something else"))
	var out rec
	err := crypto.Open(k.Public, crypto.DomainTest, crypto.Signed{Body: garbage, Sig: sig}, &out)
	require.ErrorIs(t, err, crypto.ErrBadSignature)

	// The same garbage, validly signed, gets through the signature check and fails to decode.
	err = crypto.Open(k.Public, crypto.DomainTest, crypto.Signed{Body: garbage, Sig: k.Sign(crypto.DomainTest, garbage)}, &out)
	require.Error(t, err)
	require.NotErrorIs(t, err, crypto.ErrBadSignature)

	// A validly signed body that is not canonical is refused too.
	nonCanon := unhex(t, "a2 02 61 78 01 01")
	err = crypto.Open(k.Public, crypto.DomainTest, crypto.Signed{Body: nonCanon, Sig: k.Sign(crypto.DomainTest, nonCanon)}, &out)
	require.ErrorContains(t, err, "deterministic")
	require.NotErrorIs(t, err, crypto.ErrBadSignature)

	// A validly signed body with an unknown field is refused.
	unknown := unhex(t, "a2 01 01 04 00")
	err = crypto.Open(k.Public, crypto.DomainTest, crypto.Signed{Body: unknown, Sig: k.Sign(crypto.DomainTest, unknown)}, &out)
	require.ErrorContains(t, err, "unknown field")

	require.Error(t, crypto.Open(nil, crypto.DomainTest, crypto.Signed{}, &out))
}

func TestSealRefusesUnencodable(t *testing.T) {
	_, err := crypto.Seal(testKey(t, crypto.Ed25519, 23), crypto.DomainTest, func() {})
	require.Error(t, err)
}
