package crypto_test

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/stretchr/testify/require"
)

// Every fuzz target checks that the decoder never panics, and that whatever it
// accepts survives a round trip. Seeds: real keys and signatures of every
// scheme, plus the hand-written hostile inputs of codec_test.go.

func hostileSeeds() [][]byte {
	var out [][]byte
	for _, h := range []string{
		"a2010102 6178", "a301010261780102", "bf0101026178ff", "a1027f6178ff", "d9d9f7a10101",
		"a1010100", "a10262fffe", "a201180102 6178", "a2026178 0101", "825f4100ff40", "9b7fffffffffffffff00",
	} {
		b, err := hexNoSpace(h)
		if err == nil {
			out = append(out, b)
		}
	}
	return out
}

func FuzzUnmarshalPublicKey(f *testing.F) {
	for i, scheme := range crypto.Schemes() {
		b, err := crypto.Marshal(testKey(f, scheme, uint64(30+i)).Public.Wire)
		require.NoError(f, err)
		f.Add(b)
	}
	for _, b := range hostileSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var k crypto.PublicKey
		if crypto.Unmarshal(data, &k) != nil {
			return
		}
		again, err := crypto.Marshal(k)
		require.NoError(t, err)
		var k2 crypto.PublicKey
		require.NoError(t, crypto.UnmarshalCanonical(again, &k2))
		require.Equal(t, k, k2)
		_ = k.String()
		p, err := k.Parse()
		if err != nil {
			return
		}
		require.Equal(t, k.Fingerprint(), p.ID)
		p2, err := crypto.ParsePublicKeyString(k.String())
		require.NoError(t, err)
		require.Equal(t, p.ID, p2.ID)
		require.False(t, p.Verify(crypto.DomainTest, data, nil))
	})
}

func FuzzUnmarshalSigned(f *testing.F) {
	k := testKey(f, crypto.Ed25519, 40)
	s, err := crypto.Seal(k, crypto.DomainTest, rec{A: 1, B: "x", C: []uint64{2}})
	require.NoError(f, err)
	b, err := crypto.Marshal(s)
	require.NoError(f, err)
	f.Add(b)
	for _, b := range hostileSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s crypto.Signed
		if crypto.Unmarshal(data, &s) != nil {
			return
		}
		again, err := crypto.Marshal(s)
		require.NoError(t, err)
		var s2 crypto.Signed
		require.NoError(t, crypto.UnmarshalCanonical(again, &s2))
		require.Equal(t, s, s2)
		var r rec
		if err := crypto.Open(k.Public, crypto.DomainTest, s, &r); err == nil {
			canon, err := crypto.Marshal(r)
			require.NoError(t, err)
			require.Equal(t, s.Body, canon, "Open accepted a non-canonical body")
		}
	})
}

func FuzzUnmarshalCanonical(f *testing.F) {
	for _, v := range []rec{{}, {A: 1}, {A: 1 << 40, B: "lock/ü", C: []uint64{0, 23, 24, 255, 256, 1 << 63}}} {
		b, err := crypto.Marshal(v)
		require.NoError(f, err)
		f.Add(b)
	}
	for _, b := range hostileSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r rec
		if err := crypto.UnmarshalCanonical(data, &r); err == nil {
			again, err := crypto.Marshal(r)
			require.NoError(t, err)
			require.Equal(t, data, again)
		}
		// Whatever plain Unmarshal accepts has one canonical form, which UnmarshalCanonical accepts.
		var loose rec
		if crypto.Unmarshal(data, &loose) == nil {
			canon, err := crypto.Marshal(loose)
			require.NoError(t, err)
			var strict rec
			require.NoError(t, crypto.UnmarshalCanonical(canon, &strict))
			again, err := crypto.Marshal(strict)
			require.NoError(t, err)
			require.Equal(t, canon, again)
		}
		// Untyped decoding, where the decoder picks the types, must not panic either.
		var v any
		if crypto.UnmarshalCanonical(data, &v) == nil {
			again, err := crypto.Marshal(v)
			require.NoError(t, err)
			require.Equal(t, data, again)
		}
	})
}

func FuzzParsePublicKeyString(f *testing.F) {
	for i, scheme := range crypto.Schemes() {
		f.Add(testKey(f, scheme, uint64(50+i)).Public.Wire.String())
	}
	f.Add("Ed25519:")
	f.Add(" Ed25519:AAAA\n")
	f.Add("RSA:AAAA")
	f.Add("::::")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := crypto.ParsePublicKeyString(s)
		if err != nil {
			require.Nil(t, p)
			return
		}
		p2, err := p.Wire.Parse()
		require.NoError(t, err)
		require.Equal(t, p.ID, p2.ID)
		p3, err := crypto.ParsePublicKeyString(p.Wire.String())
		require.NoError(t, err)
		require.Equal(t, p.Wire, p3.Wire)
		require.Equal(t, p.ID, p3.ID)
	})
}

// FuzzParseVerify feeds arbitrary key and signature bytes of every scheme to
// the one verifier: it must never panic, and never accept a signature made by
// a different (real) key.
func FuzzParseVerify(f *testing.F) {
	for i, scheme := range crypto.Schemes() {
		k := testKey(f, scheme, uint64(60+i))
		body := []byte("body")
		f.Add(uint8(i), k.Public.Wire.Key, body, k.Sign(crypto.DomainTest, body))
	}
	f.Add(uint8(0), make([]byte, 32), []byte{}, make([]byte, 64))
	f.Fuzz(func(t *testing.T, which uint8, key, body, sig []byte) {
		scheme := crypto.Schemes()[int(which)%len(crypto.Schemes())]
		p, err := crypto.PublicKey{Scheme: scheme, Key: key}.Parse()
		if err != nil {
			return
		}
		ok := p.Verify(crypto.DomainTest, body, sig)
		require.Equal(t, ok, p.Verify(crypto.DomainTest, body, sig), "verification is deterministic")
		if ok {
			require.False(t, p.Verify(crypto.DomainView, body, sig) && !isWeakEd25519(scheme, key), "a signature verified in two domains")
		}
	})
}

// isWeakEd25519 reports a small-order Ed25519 key, under which circl accepts
// a trivial signature on every message (see TestEd25519SpecialKeysConsistent).
func isWeakEd25519(scheme string, key []byte) bool {
	if scheme != crypto.Ed25519 {
		return false
	}
	p, err := crypto.PublicKey{Scheme: scheme, Key: key}.Parse()
	if err != nil {
		return false
	}
	trivial := make([]byte, 64)
	trivial[0] = 1
	return p.Verify(crypto.DomainTest, []byte("probe"), trivial)
}

func hexNoSpace(s string) ([]byte, error) { return hex.DecodeString(strings.ReplaceAll(s, " ", "")) }
