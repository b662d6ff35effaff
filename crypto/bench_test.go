package crypto_test

import (
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/stretchr/testify/require"
)

// benchBody is about the size of a signed statement body.
var benchBody = make([]byte, 120)

func BenchmarkSign(b *testing.B) {
	for _, scheme := range crypto.Schemes() {
		b.Run(scheme, func(b *testing.B) {
			k := testKey(b, scheme, 70)
			b.ReportAllocs()
			b.SetBytes(int64(len(benchBody)))
			for b.Loop() {
				k.Sign(crypto.DomainStatement, benchBody)
			}
		})
	}
}

// BenchmarkVerify is one signature check by the scheme's verifier (the
// verdict memo bypassed: it would answer every round after the first).
func BenchmarkVerify(b *testing.B) {
	for _, scheme := range crypto.Schemes() {
		b.Run(scheme, func(b *testing.B) {
			k := testKey(b, scheme, 71)
			sig := k.Sign(crypto.DomainStatement, benchBody)
			b.ReportAllocs()
			b.SetBytes(int64(len(benchBody)))
			for b.Loop() {
				if !k.Public.VerifyUncached(crypto.DomainStatement, benchBody, sig) {
					b.Fatal("signature does not verify")
				}
			}
		})
	}
}

// BenchmarkVerifyRemembered is a check the memo answers: a signature that
// a connection's read loop verified, checked again by the core.
func BenchmarkVerifyRemembered(b *testing.B) {
	k := testKey(b, crypto.Ed25519, 74)
	sig := k.Sign(crypto.DomainStatement, benchBody)
	b.ReportAllocs()
	for b.Loop() {
		if !k.Public.Verify(crypto.DomainStatement, benchBody, sig) {
			b.Fatal("signature does not verify")
		}
	}
}

// BenchmarkParse measures PublicKey.Parse, which SignedStatement.Verify runs on every call.
func BenchmarkParse(b *testing.B) {
	for _, scheme := range crypto.Schemes() {
		b.Run(scheme, func(b *testing.B) {
			w := testKey(b, scheme, 72).Public.Wire
			b.ReportAllocs()
			for b.Loop() {
				if _, err := w.Parse(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	k := testKey(b, crypto.Ed25519, 73)
	s, err := crypto.Seal(k, crypto.DomainStatement, rec{A: 1, B: "a lock name", C: []uint64{1, 2, 3}})
	require.NoError(b, err)
	b.ReportAllocs()
	b.SetBytes(int64(len(s.Body)))
	for b.Loop() {
		var r rec
		if err := crypto.Open(k.Public, crypto.DomainStatement, s, &r); err != nil {
			b.Fatal(err)
		}
	}
}
