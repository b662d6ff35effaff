package crypto

import (
	"crypto/sha512"
	"encoding/hex"
	"math/big"
	"math/rand/v2"
	"testing"

	circled "github.com/cloudflare/circl/sign/ed25519"
	"github.com/oasisprotocol/curve25519-voi/curve"
	"github.com/oasisprotocol/curve25519-voi/curve/scalar"
	"github.com/stretchr/testify/require"
)

// circlVerdict is the verdict of the verifier bq used before round four
// (circl), the reference the fast path must match on every input.
func circlVerdict(key, msg, sig []byte) bool {
	return circled.Verify(circled.PublicKey(key), msg, sig)
}

// voiVerdict is what Parsed.Verify decides, or "refused" when Parse refuses the key.
func voiVerdict(t testing.TB, key, msg, sig []byte) (ok, refused bool) {
	p, err := PublicKey{Scheme: Ed25519, Key: key}.Parse()
	if err != nil {
		return false, true
	}
	return verifyEd25519(p.ed, msg, sig), false
}

// forger crafts Ed25519 signatures with group arithmetic, from a seeded stream.
type forger struct{ r *rand.Rand }

func (f forger) scalar() *scalar.Scalar {
	var b [64]byte
	for i := range b {
		b[i] = byte(f.r.Uint32())
	}
	s, err := scalar.New().SetBytesModOrderWide(b[:])
	if err != nil {
		panic(err)
	}
	return s
}

func enc(p *curve.EdwardsPoint) []byte {
	var c curve.CompressedEdwardsY
	c.SetEdwardsPoint(p)
	return c[:]
}

func base(s *scalar.Scalar) *curve.EdwardsPoint {
	return curve.NewEdwardsPoint().MulBasepoint(curve.ED25519_BASEPOINT_TABLE, s)
}

func challenge(r, a, msg []byte) *scalar.Scalar {
	h := sha512.New()
	h.Write(r)
	h.Write(a)
	h.Write(msg)
	k, err := scalar.New().SetBytesModOrderWide(h.Sum(nil))
	if err != nil {
		panic(err)
	}
	return k
}

// sig is R's encoding followed by S = r + k·a.
func sigOf(rEnc []byte, r, k, a *scalar.Scalar) []byte {
	s := scalar.New().Add(r, scalar.New().Mul(k, a))
	var sb [32]byte
	if err := s.ToBytes(sb[:]); err != nil {
		panic(err)
	}
	return append(append([]byte(nil), rEnc...), sb[:]...)
}

// plusL adds the group order to S (a second, non-canonical encoding of it).
func plusL(sig []byte) []byte {
	le := func(b []byte) *big.Int {
		r := make([]byte, len(b))
		for i := range b {
			r[len(b)-1-i] = b[i]
		}
		return new(big.Int).SetBytes(r)
	}
	l, _ := new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)
	s := new(big.Int).Add(le(sig[32:]), l)
	out := append([]byte(nil), sig[:32]...)
	be := s.FillBytes(make([]byte, 32))
	for i := range be {
		out = append(out, be[31-i])
	}
	return out
}

type craftedCase struct {
	what          string
	key, msg, sig []byte
}

// craft makes n rounds of every kind of crafted signature the two
// verification equations (cofactorless and cofactored) can disagree on.
func craft(seed uint64, n int) []craftedCase {
	f := forger{rand.New(rand.NewPCG(seed, seed^0xed))}
	var out []craftedCase
	add := func(what string, key, msg, sig []byte) {
		out = append(out, craftedCase{what, append([]byte(nil), key...), msg, sig})
	}
	for i := 0; i < n; i++ {
		msg := []byte{byte(i), byte(i >> 8), 'm'}
		a := f.scalar()
		A := base(a)
		T := curve.EIGHT_TORSION[1+i%7]
		for _, key := range []struct {
			what string
			P    *curve.EdwardsPoint
		}{
			{"honest key", A},
			{"mixed-order key", curve.NewEdwardsPoint().Add(A, T)},
		} {
			kb := enc(key.P)
			r := f.scalar()
			R := base(r)
			// An honest signature (on a mixed-order key it holds when T·k = 0).
			honest := sigOf(enc(R), r, challenge(enc(R), kb, msg), a)
			add(key.what+", honest signature", kb, msg, honest)
			add(key.what+", S + L", kb, msg, plusL(honest))
			add(key.what+", another message", kb, append(msg, 'x'), honest)
			// R with a torsion component: only the cofactored equation holds.
			for t := 1; t < 8; t += 3 {
				Rt := curve.NewEdwardsPoint().Add(R, curve.EIGHT_TORSION[t])
				add(key.what+", torsioned R", kb, msg, sigOf(enc(Rt), r, challenge(enc(Rt), kb, msg), a))
			}
			// R the identity, canonically and as y = p + 1, with S = k·a.
			zero := scalar.New()
			for _, h := range []string{
				"0100000000000000000000000000000000000000000000000000000000000000",
				"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
				"0100000000000000000000000000000000000000000000000000000000000080",
			} {
				re, _ := hex.DecodeString(h)
				add(key.what+", R = identity "+h[:4], kb, msg, sigOf(re, zero, challenge(re, kb, msg), a))
			}
			// R of small order, S = k·a.
			re := enc(curve.EIGHT_TORSION[1+(i+3)%7])
			add(key.what+", small-order R", kb, msg, sigOf(re, zero, challenge(re, kb, msg), a))
			// Random bytes.
			junk := make([]byte, 64)
			for j := range junk {
				junk[j] = byte(f.r.Uint32())
			}
			junk[63] &= 0x0f
			add(key.what+", random signature", kb, msg, junk)
		}
	}
	return out
}

// The fast path decides every crafted signature as circl does: the verdict is
// the one bq has had since 1.0, so servers of mixed releases never split on a
// statement a Byzantine client crafted (docs/protocol.md §1, "the rule").
func TestEd25519VerifiersAgree(t *testing.T) {
	seed := uint64(0x7e57_a9ee)
	n := 200
	if testing.Short() {
		n = 40
	}
	t.Logf("seed %#x, %d rounds", seed, n)
	accepted := map[string]int{}
	for _, c := range craft(seed, n) {
		want := circlVerdict(c.key, c.msg, c.sig)
		got, refused := voiVerdict(t, c.key, c.msg, c.sig)
		require.False(t, refused, "%s: a point of large order was refused: %x", c.what, c.key)
		require.Equal(t, want, got, "%s: key %x msg %x sig %x", c.what, c.key, c.msg, c.sig)
		if got {
			accepted[c.what]++
		}
	}
	t.Logf("accepted: %v", accepted)
	// The cases must reach both verdicts where the equations differ, or they test nothing.
	require.Equal(t, n, accepted["honest key, honest signature"])
	require.Zero(t, accepted["honest key, torsioned R"], "the cofactored equation's verdict")
	require.Zero(t, accepted["honest key, S + L"])
	require.Equal(t, n, accepted["honest key, R = identity 0100"], "cofactorless: [k·a]B − [k]A is the identity")
	require.Zero(t, accepted["honest key, R = identity eeff"], "a non-canonical R never verifies")
	require.Positive(t, accepted["mixed-order key, honest signature"])
	require.Less(t, accepted["mixed-order key, honest signature"], n)
	require.Positive(t, accepted["mixed-order key, torsioned R"])
}

// Every small-order or non-canonical key is refused before any verifier sees it.
func TestEd25519WeakKeysNeverReachAVerifier(t *testing.T) {
	for _, w := range smallOrderEd25519 {
		_, refused := voiVerdict(t, w, []byte("m"), make([]byte, 64))
		require.True(t, refused, "%x", w)
	}
	for _, T := range curve.EIGHT_TORSION {
		_, refused := voiVerdict(t, enc(T), []byte("m"), make([]byte, 64))
		require.True(t, refused, "%x", enc(T))
	}
}

// FuzzEd25519VerifiersAgree compares both verifiers on arbitrary keys,
// messages and signatures, seeded with the crafted cases.
func FuzzEd25519VerifiersAgree(f *testing.F) {
	for _, c := range craft(1, 4) {
		f.Add(c.key, c.msg, c.sig)
	}
	f.Fuzz(func(t *testing.T, key, msg, sig []byte) {
		if len(key) != 32 {
			return
		}
		got, refused := voiVerdict(t, key, msg, sig)
		if refused {
			return
		}
		require.Equal(t, circlVerdict(key, msg, sig), got, "key %x msg %x sig %x", key, msg, sig)
	})
}

// The cache of expanded keys stays within its two generations whatever
// number of keys arrives, and answers a key it holds without expanding it again.
func TestExpandedKeyCacheIsBounded(t *testing.T) {
	c := newKeyCache()
	var k [32]byte
	k[0] = 9 // a point (the base point's y is 4/5; any decodable y works)
	for i := 0; i < 3*expandedGeneration+5; i++ {
		k[1], k[2] = byte(i), byte(i>>8)
		c.get(k)
		cur, old := c.lens()
		require.LessOrEqual(t, cur, expandedGeneration)
		require.LessOrEqual(t, old, expandedGeneration)
	}
	misses := c.misses.Load()
	c.get(k)
	require.Equal(t, misses, c.misses.Load(), "a key just used is not expanded again")
}

// Ed25519 signing is deterministic: the signer bq uses (curve25519-voi)
// makes, for every seed and message, the bytes circl's signer makes, so a
// signature is the same whichever release made it.
func TestEd25519SignersAgree(t *testing.T) {
	seed := uint64(0x516e_a9ee)
	t.Logf("seed %#x", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < 300; i++ {
		s := make([]byte, 32)
		for j := range s {
			s[j] = byte(r.Uint32())
		}
		body := make([]byte, r.IntN(300))
		for j := range body {
			body[j] = byte(r.Uint32())
		}
		k, err := PrivateKeyFromSeed(Ed25519, s)
		require.NoError(t, err)
		ref := circled.Sign(circled.NewKeyFromSeed(s), DomainTest.message(body))
		require.Equal(t, ref, k.Sign(DomainTest, body), "seed %x body %x", s, body)
		require.Equal(t, []byte(circled.NewKeyFromSeed(s).Public().(circled.PublicKey)), k.Public.Wire.Key)
	}
}
