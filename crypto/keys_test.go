package crypto_test

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/stretchr/testify/require"
)

var allDomains = []crypto.Domain{
	crypto.DomainStatement, crypto.DomainView, crypto.DomainSuspect, crypto.DomainHello, crypto.DomainTest,
}

// flipPositions lists the byte positions whose bits a test flips in a
// signature of n bytes: all of them for short signatures, and for the large
// post-quantum ones the first and last 64 bytes plus a stride through the
// middle (all of them would take seconds under -race).
func flipPositions(n int) []int {
	var ps []int
	for i := 0; i < n; i++ {
		if n <= 128 || i < 64 || i >= n-64 || i%17 == 0 {
			ps = append(ps, i)
		}
	}
	return ps
}

func TestSchemesDefaultFirst(t *testing.T) {
	s := crypto.Schemes()
	require.Equal(t, crypto.DefaultScheme, s[0])
	require.ElementsMatch(t, []string{crypto.Ed25519, crypto.MLDSA44, crypto.Ed25519Dilithium2}, s)
	for _, name := range s {
		require.NoError(t, crypto.CheckScheme(name))
	}
	require.Error(t, crypto.CheckScheme("ed25519")) // names are case sensitive
	require.Error(t, crypto.CheckScheme(""))
}

func TestSignVerifyRoundTrip(t *testing.T) {
	for _, scheme := range crypto.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			k := testKey(t, scheme, 1)
			require.Equal(t, scheme, k.Scheme())
			for _, body := range [][]byte{nil, {}, []byte("body"), bytes.Repeat([]byte{0xa5}, 4096)} {
				for _, d := range allDomains {
					sig := k.Sign(d, body)
					require.True(t, k.Public.Verify(d, body, sig), "domain %s", d)
				}
			}
		})
	}
}

// A signature made in one domain never verifies in another (docs/protocol.md §1).
func TestDomainSeparation(t *testing.T) {
	for _, scheme := range crypto.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			k := testKey(t, scheme, 2)
			body := []byte("the same bytes")
			for _, signed := range allDomains {
				sig := k.Sign(signed, body)
				for _, checked := range allDomains {
					require.Equal(t, signed == checked, k.Public.Verify(checked, body, sig), "signed in %s, checked in %s", signed, checked)
				}
			}
			// The NUL terminator: moving bytes between the domain and the body never verifies.
			sig := k.Sign("bq/v1/x", []byte("yz"))
			require.False(t, k.Public.Verify("bq/v1/xy", []byte("z"), sig))
			require.False(t, k.Public.Verify("bq/v1/", []byte("xyz"), sig))
		})
	}
}

func TestFlippedBitFails(t *testing.T) {
	for _, scheme := range crypto.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			k := testKey(t, scheme, 3)
			body := []byte("a body whose every bit matters")
			sig := k.Sign(crypto.DomainTest, body)
			for i := range body {
				for bit := 0; bit < 8; bit++ {
					b := bytes.Clone(body)
					b[i] ^= 1 << bit
					require.False(t, k.Public.Verify(crypto.DomainTest, b, sig), "body byte %d bit %d", i, bit)
				}
			}
			for _, i := range flipPositions(len(sig)) {
				for bit := 0; bit < 8; bit++ {
					if len(sig) > 128 && bit != i%8 {
						continue
					}
					s := bytes.Clone(sig)
					s[i] ^= 1 << bit
					require.False(t, k.Public.Verify(crypto.DomainTest, body, s), "sig byte %d bit %d", i, bit)
				}
			}
		})
	}
}

func TestWrongKeyFails(t *testing.T) {
	for _, scheme := range crypto.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			k1, k2 := testKey(t, scheme, 4), testKey(t, scheme, 5)
			require.NotEqual(t, k1.Public.Wire.Key, k2.Public.Wire.Key)
			body := []byte("body")
			require.False(t, k2.Public.Verify(crypto.DomainTest, body, k1.Sign(crypto.DomainTest, body)))
			require.False(t, k1.Public.Verify(crypto.DomainTest, body, k2.Sign(crypto.DomainTest, body)))
		})
	}
}

func TestWrongLengthSignatureFails(t *testing.T) {
	for _, scheme := range crypto.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			k := testKey(t, scheme, 6)
			body := []byte("body")
			sig := k.Sign(crypto.DomainTest, body)
			for _, s := range [][]byte{nil, {}, sig[:1], sig[:len(sig)-1], append(bytes.Clone(sig), 0), append(bytes.Clone(sig), sig...)} {
				require.NotPanics(t, func() {
					require.False(t, k.Public.Verify(crypto.DomainTest, body, s), "sig of %d bytes", len(s))
				})
			}
		})
	}
	// Signatures of one scheme are never the length of another's.
	for _, a := range crypto.Schemes() {
		for _, b := range crypto.Schemes() {
			if a == b {
				continue
			}
			ka, kb := testKey(t, a, 7), testKey(t, b, 7)
			require.False(t, kb.Public.Verify(crypto.DomainTest, []byte("x"), ka.Sign(crypto.DomainTest, []byte("x"))), "%s sig under %s key", a, b)
		}
	}
}

func TestParseRejects(t *testing.T) {
	good := testKey(t, crypto.Ed25519, 8).Public.Wire
	cases := map[string]crypto.PublicKey{
		"zero value":          {},
		"unknown scheme":      {Scheme: "RSA", Key: good.Key},
		"scheme wrong case":   {Scheme: "ed25519", Key: good.Key},
		"empty key":           {Scheme: crypto.Ed25519},
		"short key":           {Scheme: crypto.Ed25519, Key: good.Key[:31]},
		"long key":            {Scheme: crypto.Ed25519, Key: append(bytes.Clone(good.Key), 0)},
		"ed key as ML-DSA":    {Scheme: crypto.MLDSA44, Key: good.Key},
		"ed key as hybrid":    {Scheme: crypto.Ed25519Dilithium2, Key: good.Key},
		"ML-DSA short by one": {Scheme: crypto.MLDSA44, Key: make([]byte, 1311)},
		"hybrid long by one":  {Scheme: crypto.Ed25519Dilithium2, Key: make([]byte, 1345)},
	}
	for name, k := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := k.Parse()
			require.Error(t, err)
			require.Nil(t, p)
			require.True(t, strings.HasPrefix(err.Error(), "crypto: "), err.Error())
		})
	}
}

func TestParseAccepts(t *testing.T) {
	for _, scheme := range crypto.Schemes() {
		k := testKey(t, scheme, 9)
		p, err := k.Public.Wire.Parse()
		require.NoError(t, err)
		require.Equal(t, k.Public.Wire, p.Wire)
		require.Equal(t, k.Public.ID, p.ID)
		require.Equal(t, k.Public.Wire.Fingerprint(), p.ID)
		body := []byte("parsed keys verify like generated ones")
		require.True(t, p.Verify(crypto.DomainTest, body, k.Sign(crypto.DomainTest, body)))
	}
}

func TestPublicKeyStringRoundTrip(t *testing.T) {
	for _, scheme := range crypto.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			k := testKey(t, scheme, 10)
			s := k.Public.Wire.String()
			require.True(t, strings.HasPrefix(s, scheme+":"), s)
			require.NotContains(t, s, "=")
			require.NotContains(t, s, "\n")
			p, err := crypto.ParsePublicKeyString(s)
			require.NoError(t, err)
			require.Equal(t, k.Public.Wire, p.Wire)
			require.Equal(t, k.Public.ID, p.ID)
			p, err = crypto.ParsePublicKeyString("  " + s + "\n") // as read from a file
			require.NoError(t, err)
			require.Equal(t, k.Public.Wire, p.Wire)
		})
	}
	ed := testKey(t, crypto.Ed25519, 10).Public.Wire
	for _, bad := range []string{
		"",
		"Ed25519",
		":" + ed.String()[len("Ed25519:"):],
		"RSA:" + ed.String()[len("Ed25519:"):],
		"Ed25519:" + ed.String()[len("Ed25519:"):] + "=",  // padding is not the raw form
		"Ed25519:" + ed.String()[len("Ed25519:"):] + "AA", // one byte too long
		"Ed25519:" + ed.String()[len("Ed25519:"):40],      // too short
		"Ed25519:" + strings.Repeat("+", 43),              // standard, not URL, alphabet
		"ML-DSA-44:" + ed.String()[len("Ed25519:"):],
	} {
		_, err := crypto.ParsePublicKeyString(bad)
		require.Error(t, err, "%q", bad)
	}
}

func TestPrivateKeyFromSeed(t *testing.T) {
	for _, scheme := range crypto.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			var seed [32]byte
			seed[0] = 42
			k1, err := crypto.GenerateKey(scheme, rand.NewChaCha8(seed))
			require.NoError(t, err)
			k2, err := crypto.PrivateKeyFromSeed(scheme, k1.Seed())
			require.NoError(t, err)
			require.Equal(t, k1.Public.Wire, k2.Public.Wire)
			require.Equal(t, k1.Public.ID, k2.Public.ID)
			require.Equal(t, k1.Seed(), k2.Seed())
			body := []byte("signed by the rebuilt key")
			require.True(t, k1.Public.Verify(crypto.DomainTest, body, k2.Sign(crypto.DomainTest, body)))

			// Seed returns a copy: changing it does not change the key.
			s := k1.Seed()
			s[0] ^= 0xff
			require.NotEqual(t, s, k1.Seed())

			_, err = crypto.PrivateKeyFromSeed(scheme, k1.Seed()[1:])
			require.Error(t, err)
			_, err = crypto.PrivateKeyFromSeed(scheme, append(k1.Seed(), 0))
			require.Error(t, err)
		})
	}
	_, err := crypto.PrivateKeyFromSeed("nope", make([]byte, 32))
	require.Error(t, err)
	_, err = crypto.GenerateKey("nope", rand.NewChaCha8([32]byte{}))
	require.Error(t, err)
	_, err = crypto.GenerateKey(crypto.Ed25519, bytes.NewReader(make([]byte, 31)))
	require.Error(t, err, "short randomness must be an error")
}

func TestFingerprintDiffersAcrossSchemes(t *testing.T) {
	raw := bytes.Repeat([]byte{7}, 32)
	seen := map[[32]byte]string{}
	for _, scheme := range crypto.Schemes() {
		fp := crypto.PublicKey{Scheme: scheme, Key: raw}.Fingerprint()
		require.NotContains(t, seen, fp, "%s shares a fingerprint with %s", scheme, seen[fp])
		seen[fp] = scheme
	}
	// And real keys of each scheme made from one seed.
	for _, scheme := range crypto.Schemes() {
		fp := testKey(t, scheme, 11).Public.ID
		require.NotContains(t, seen, fp)
		seen[fp] = scheme
	}
}

// Every Ed25519 key is decided the same way, whichever path parsed it and
// however often it is asked (the second time from the verdict memo).
// Small-order and non-canonical points are refused by Parse (weakkeys.go);
// what matters for Byzantine tolerance is that all correct servers agree,
// and they do because they run one rule (ed25519verify.go).
func TestEd25519SpecialKeysConsistent(t *testing.T) {
	special := []string{
		"0100000000000000000000000000000000000000000000000000000000000000", // identity (order 1)
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // (0,-1), order 2
		"0000000000000000000000000000000000000000000000000000000000000080", // x sign bit on y=0, order 4
		"0000000000000000000000000000000000000000000000000000000000000000", // y=0, order 4
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", // order 8
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", // order 8
		"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p (non-canonical 0)
		"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p+1 (non-canonical 1)
		"0100000000000000000000000000000000000000000000000000000000000080", // identity with x sign bit
		"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff", // y ≥ p
	}
	good := testKey(t, crypto.Ed25519, 12)
	trivial := make([]byte, 64) // R = identity, S = 0
	trivial[0] = 1
	sigs := map[string][]byte{
		"trivial": trivial,
		"zero":    make([]byte, 64),
		"real":    good.Sign(crypto.DomainTest, []byte("m")),
	}
	for _, h := range special {
		raw, err := hex.DecodeString(h)
		require.NoError(t, err)
		w := crypto.PublicKey{Scheme: crypto.Ed25519, Key: raw}
		var p1, p2 *crypto.Parsed
		require.NotPanics(t, func() { p1, err = w.Parse() })
		if err != nil {
			_, err2 := crypto.ParsePublicKeyString(w.String())
			require.Error(t, err2, "string form must be rejected like the wire form: %s", h)
			continue
		}
		p2, err = crypto.ParsePublicKeyString(w.String())
		require.NoError(t, err)
		for name, sig := range sigs {
			for _, msg := range [][]byte{[]byte("m"), []byte("another")} {
				var v1, v2, v3 bool
				require.NotPanics(t, func() {
					v1 = p1.Verify(crypto.DomainTest, msg, sig)
					v2 = p2.Verify(crypto.DomainTest, msg, sig)
					v3 = p1.Verify(crypto.DomainTest, msg, sig)
				})
				require.Equal(t, v1, v2, "key %s sig %s", h, name)
				require.Equal(t, v1, v3, "key %s sig %s", h, name)
				if name == "real" {
					require.False(t, v1, "a real signature by another key verified under %s", h)
				}
				if v1 {
					t.Logf("note: small-order/non-canonical key %s accepts the %q signature on %q", h, name, msg)
				}
			}
		}
	}
	// A properly generated key never accepts the trivial forgery.
	require.False(t, good.Public.Verify(crypto.DomainTest, []byte("m"), trivial))
}

// Parse+Verify never panics on 32 arbitrary bytes (seeded; replay with the logged seed).
func TestEd25519ArbitraryKeysNeverPanic(t *testing.T) {
	seed := uint64(0x5eed_ed25519)
	t.Logf("seed %#x", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	n := 2000
	if testing.Short() {
		n = 200
	}
	for i := 0; i < n; i++ {
		raw := make([]byte, 32)
		for j := range raw {
			raw[j] = byte(r.Uint32())
		}
		sig := make([]byte, 64)
		for j := range sig {
			sig[j] = byte(r.Uint32())
		}
		require.NotPanics(t, func() {
			p, err := crypto.PublicKey{Scheme: crypto.Ed25519, Key: raw}.Parse()
			if err == nil {
				_ = p.Verify(crypto.DomainTest, raw, sig)
			}
		}, "key %x sig %x", raw, sig)
	}
}
