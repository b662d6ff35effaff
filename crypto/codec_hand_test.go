package crypto

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The library's reflection, for comparison: same shapes, no methods.
type refSigned struct {
	_    struct{} `cbor:",toarray"`
	Body []byte
	Sig  []byte
}

type refKey struct {
	_      struct{} `cbor:",toarray"`
	Scheme string
	Key    []byte
}

func handSeed(t *testing.T) uint64 {
	seed := rand.Uint64()
	if s := os.Getenv("BQ_CODEC_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (replay: BQ_CODEC_SEED=%d go test ./crypto -run %s)", seed, seed, t.Name())
	return seed
}

// randBytes is nil, empty, or of a length on either side of a head size.
func randBytes(r *rand.Rand) []byte {
	switch r.IntN(8) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, []int{1, 23, 24, 32, 64, 255, 256, 1312}[r.IntN(8)])
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func randScheme(r *rand.Rand) string {
	return []string{"", Ed25519, MLDSA44, "é→", string([]byte{0xff, 'x'}), "a-very-long-scheme-name-past-23"}[r.IntN(6)]
}

// damage changes one thing in an encoding.
func damage(r *rand.Rand, b []byte) []byte {
	b = append([]byte(nil), b...)
	switch r.IntN(5) {
	case 0:
		if len(b) > 0 {
			b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
		}
	case 1:
		if len(b) > 0 {
			b[r.IntN(len(b))] = []byte{0x40, 0x58, 0x59, 0x5f, 0x60, 0x78, 0x80, 0x81, 0x82, 0x83, 0x98, 0xa0, 0xf4, 0xf6, 0xf7, 0xff, 0x00, 0x18}[r.IntN(18)]
		}
	case 2:
		b = b[:r.IntN(len(b)+1)]
	case 3:
		i := r.IntN(len(b) + 1)
		b = append(b[:i], append([]byte{byte(r.Uint32())}, b[i:]...)...)
	case 4:
		b = append(b, byte(r.Uint32()))
	}
	return b
}

// neverLooser: whatever the hand-written decoder accepts, the library
// accepts with the same value (both strict and frame decoding).
func neverLooser(t testing.TB, b []byte) {
	t.Helper()
	for _, dec := range []func([]byte, any) error{Unmarshal, UnmarshalFrame} {
		var s Signed
		if dec(b, &s) == nil {
			var ref refSigned
			require.NoError(t, dec(b, &ref), "%x: the hand decoder accepts a Signed the library refuses", b)
			require.Equal(t, ref.Body, s.Body)
			require.Equal(t, ref.Sig, s.Sig)
			require.Equal(t, ref.Body == nil, s.Body == nil)
			require.Equal(t, ref.Sig == nil, s.Sig == nil)
		}
		var k PublicKey
		if dec(b, &k) == nil {
			var ref refKey
			require.NoError(t, dec(b, &ref), "%x: the hand decoder accepts a PublicKey the library refuses", b)
			require.Equal(t, ref.Scheme, k.Scheme)
			require.Equal(t, ref.Key, k.Key)
			require.Equal(t, ref.Key == nil, k.Key == nil)
		}
	}
}

func TestHandCodecsMatchLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(handSeed(t), 0))
	for range 5000 {
		// What Marshal writes, the hand decoders read back exactly.
		sv := refSigned{Body: randBytes(r), Sig: randBytes(r)}
		b, err := Marshal(sv)
		require.NoError(t, err)
		var s Signed
		require.NoError(t, Unmarshal(b, &s))
		require.Equal(t, sv.Body, s.Body)
		require.Equal(t, sv.Sig, s.Sig)
		require.Equal(t, sv.Body == nil, s.Body == nil)
		neverLooser(t, b)
		for range 4 {
			neverLooser(t, damage(r, b))
		}

		kv := refKey{Scheme: randScheme(r), Key: randBytes(r)}
		kb, err := Marshal(kv)
		require.NoError(t, err)
		require.Equal(t, kb, appendPublicKey(nil, PublicKey{Scheme: kv.Scheme, Key: kv.Key}), "Fingerprint's encoding is Marshal's")
		var k PublicKey
		if Unmarshal(kb, &k) == nil {
			require.Equal(t, kv.Scheme, k.Scheme)
			require.Equal(t, kv.Key, k.Key)
		} else {
			var ref refKey
			require.Error(t, Unmarshal(kb, &ref), "the library reads %x, the hand decoder does not", kb)
		}
		neverLooser(t, kb)
		for range 4 {
			neverLooser(t, damage(r, kb))
		}
	}
}

func FuzzHandCodecs(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 16 {
		b, _ := Marshal(refSigned{Body: randBytes(r), Sig: randBytes(r)})
		f.Add(b)
		b, _ = Marshal(refKey{Scheme: randScheme(r), Key: randBytes(r)})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { neverLooser(t, b) })
}
