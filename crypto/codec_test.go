package crypto_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/stretchr/testify/require"
)

// rec is a keyasint struct shaped like the protocol's bodies.
type rec struct {
	A uint64   `cbor:"1,keyasint"`
	B string   `cbor:"2,keyasint,omitempty"`
	C []uint64 `cbor:"3,keyasint,omitempty"`
}

func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(tb, err)
	return b
}

func TestUnmarshalAcceptsValid(t *testing.T) {
	var r rec
	require.NoError(t, crypto.Unmarshal(unhex(t, "a2 01 01 02 61 78"), &r))
	require.Equal(t, rec{A: 1, B: "x"}, r)
	require.NoError(t, crypto.UnmarshalCanonical(unhex(t, "a2 01 01 02 61 78"), &r))

	b, err := crypto.Marshal(rec{A: 1, B: "x", C: []uint64{2, 3}})
	require.NoError(t, err)
	require.Equal(t, unhex(t, "a3 01 01 02 61 78 03 82 02 03"), b)
	var r2 rec
	require.NoError(t, crypto.UnmarshalCanonical(b, &r2))
	require.Equal(t, rec{A: 1, B: "x", C: []uint64{2, 3}}, r2)
}

// Each hostile input is written out byte by byte, so the test says exactly what is refused (docs/protocol.md §8).
func TestUnmarshalRejectsHostile(t *testing.T) {
	cases := []struct {
		name string
		hex  string
	}{
		{"empty input", ""},
		{"truncated map", "a2 01 01 02"},
		{"truncated text", "a1 02 62 78"},
		{"duplicate key", "a3 01 01 02 61 78 01 02"},
		{"duplicate key, non-minimal second copy", "a3 01 01 02 61 78 18 01 02"},
		{"indefinite-length map", "bf 01 01 02 61 78 ff"},
		{"indefinite-length text", "a1 02 7f 61 78 ff"},
		{"indefinite-length array", "a1 03 9f 01 ff"},
		{"tag on the item (self-describe 55799)", "d9 d9 f7 a1 01 01"},
		{"tag on a field (bignum)", "a1 01 c2 41 01"},
		{"tag on a field (epoch time)", "a1 01 c1 01"},
		{"unknown integer key", "a2 01 01 04 00"},
		{"unknown text key", "a2 01 01 61 41 00"},
		{"text key naming a field by number", "a1 61 31 01"},
		{"negative key", "a1 20 01"},
		{"trailing byte", "a1 01 01 00"},
		{"two items", "a1 01 01 a1 01 01"},
		{"invalid UTF-8 text", "a1 02 62 ff fe"},
		{"text where uint expected", "a1 01 61 78"},
		{"negative where uint expected", "a1 01 20"},
		{"float where uint expected", "a1 01 f9 3c 00"},
		{"array where map expected", "82 01 01"},
		{"reserved additional info", "a1 01 1c"},
		{"break outside indefinite item", "ff"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r rec
			err := crypto.Unmarshal(unhex(t, c.hex), &r)
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), "crypto: "), err.Error())
			require.Error(t, crypto.UnmarshalCanonical(unhex(t, c.hex), &r))
		})
	}
}

func TestUnmarshalSizeLimit(t *testing.T) {
	// A byte string header (0x5a + 4-byte length) and payload: exactly MaxMessageSize in all is fine.
	frame := func(total int) []byte {
		n := total - 5
		b := make([]byte, total)
		b[0] = 0x5a
		b[1], b[2], b[3], b[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		return b
	}
	var v []byte
	require.NoError(t, crypto.Unmarshal(frame(crypto.MaxMessageSize), &v))
	require.Len(t, v, crypto.MaxMessageSize-5)
	err := crypto.Unmarshal(frame(crypto.MaxMessageSize+1), &v)
	require.ErrorIs(t, err, crypto.ErrOversize)
	require.ErrorIs(t, crypto.UnmarshalCanonical(frame(crypto.MaxMessageSize+1), &v), crypto.ErrOversize)

	// A header that claims more than the input holds is an error, not an allocation.
	require.Error(t, crypto.Unmarshal(unhex(t, "5b 7f ff ff ff ff ff ff ff 00"), &v))
	require.Error(t, crypto.Unmarshal(unhex(t, "9b 7f ff ff ff ff ff ff ff 00"), new([]uint64)))
}

func TestUnmarshalNestingLimit(t *testing.T) {
	nested := func(depth int) []byte { return append(bytes.Repeat([]byte{0x81}, depth), 0x00) }
	var v any
	require.NoError(t, crypto.Unmarshal(nested(crypto.MaxNesting), &v))
	require.ErrorContains(t, crypto.Unmarshal(nested(crypto.MaxNesting+1), &v), "nested")
	require.Error(t, crypto.Unmarshal(nested(1000), &v))
	// Maps count too.
	maps := append(bytes.Repeat(unhex(t, "a1 00"), crypto.MaxNesting+1), 0x00)
	require.Error(t, crypto.Unmarshal(maps, &v))
}

func TestUnmarshalArrayLimit(t *testing.T) {
	array := func(n int) []byte {
		b := []byte{0x99, byte(n >> 8), byte(n)}
		return append(b, make([]byte, n)...) // n zeros
	}
	var v []uint64
	require.NoError(t, crypto.Unmarshal(array(crypto.MaxArrayElements), &v))
	require.Len(t, v, crypto.MaxArrayElements)
	require.ErrorContains(t, crypto.Unmarshal(array(crypto.MaxArrayElements+1), &v), "array")
	// The limit is checked on the header, before the elements are there.
	require.Error(t, crypto.Unmarshal(unhex(t, "9a 00 01 00 00"), &v))
}

func TestUnmarshalMapLimit(t *testing.T) {
	pairs := func(n int) []byte {
		b := []byte{0xb8, byte(n)}
		for i := 0; i < n; i++ {
			b = append(b, 0x18, byte(i+24), 0x00) // keys 24.. so every key takes the same form
		}
		return b
	}
	var v map[uint64]uint64
	require.NoError(t, crypto.Unmarshal(pairs(crypto.MaxMapPairs), &v))
	require.Len(t, v, crypto.MaxMapPairs)
	require.ErrorContains(t, crypto.Unmarshal(pairs(crypto.MaxMapPairs+1), &v), "map")
}

func TestUnmarshalPublicKeyAndSigned(t *testing.T) {
	key := strings.Repeat("07", 32)
	var k crypto.PublicKey
	require.NoError(t, crypto.Unmarshal(unhex(t, "82 67 45643235353139 58 20"+key), &k))
	require.Equal(t, crypto.Ed25519, k.Scheme)
	require.Len(t, k.Key, 32)
	for name, h := range map[string]string{
		"one element":      "81 67 45643235353139",
		"three elements":   "83 67 45643235353139 58 20" + key + "00",
		"map form":         "a2 00 67 45643235353139 01 58 20" + key,
		"swapped":          "82 58 20" + key + "67 45643235353139",
		"key as text":      "82 67 45643235353139 78 20" + key,
		"indefinite key":   "82 67 45643235353139 5f 58 20" + key + "ff",
		"indefinite array": "9f 67 45643235353139 58 20" + key + "ff",
	} {
		require.Error(t, crypto.Unmarshal(unhex(t, h), &k), name)
	}

	var s crypto.Signed
	require.NoError(t, crypto.Unmarshal(unhex(t, "82 41 00 42 01 02"), &s))
	require.Equal(t, crypto.Signed{Body: []byte{0}, Sig: []byte{1, 2}}, s)
	for name, h := range map[string]string{
		"one element":          "81 41 00",
		"three elements":       "83 41 00 41 00 41 00",
		"indefinite body":      "82 5f 41 00 ff 40",
		"tagged body (cbor)":   "82 d8 18 41 00 40",
		"text body":            "82 61 78 40",
		"trailing after array": "82 41 00 40 00",
	} {
		require.Error(t, crypto.Unmarshal(unhex(t, h), &s), name)
	}
}

// UnmarshalCanonical accepts exactly the one deterministic encoding of a value.
func TestUnmarshalCanonicalRejectsNonCanonical(t *testing.T) {
	cases := []struct {
		name string
		hex  string
		want rec // what plain Unmarshal decodes: the same value as a canonical encoding
	}{
		{"non-minimal integer (1 as 0x18 01)", "a2 01 18 01 02 61 78", rec{A: 1, B: "x"}},
		{"non-minimal integer (5 as 0x19 0005)", "a1 01 19 00 05", rec{A: 5}},
		{"non-minimal integer (5 as 0x1b 8 bytes)", "a1 01 1b 00 00 00 00 00 00 00 05", rec{A: 5}},
		{"non-minimal text length", "a2 01 01 02 78 01 78", rec{A: 1, B: "x"}},
		{"non-minimal map key", "a2 18 01 01 02 61 78", rec{A: 1, B: "x"}},
		{"non-minimal map length", "b8 02 01 01 02 61 78", rec{A: 1, B: "x"}},
		{"map keys out of order", "a2 02 61 78 01 01", rec{A: 1, B: "x"}},
		{"non-minimal array length", "a2 01 01 03 98 01 02", rec{A: 1, C: []uint64{2}}},
		{"empty field that is omitted", "a2 01 01 02 60", rec{A: 1}},
		{"null for a field (decodes as zero)", "a2 01 f6 02 61 78", rec{B: "x"}},
		{"undefined for a field (decodes as zero)", "a2 01 f7 02 61 78", rec{B: "x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := unhex(t, c.hex)
			var r rec
			require.NoError(t, crypto.Unmarshal(data, &r), "plain Unmarshal accepts it")
			require.Equal(t, c.want, r)
			var r2 rec
			err := crypto.UnmarshalCanonical(data, &r2)
			require.ErrorContains(t, err, "deterministic")
			canon, err := crypto.Marshal(c.want)
			require.NoError(t, err)
			require.NotEqual(t, canon, data)
			require.NoError(t, crypto.UnmarshalCanonical(canon, &r2))
		})
	}
}

func TestMarshalIsDeterministic(t *testing.T) {
	// Map keys are sorted (RFC 8949 §4.2.1 core deterministic), whatever Go's map order.
	m := map[uint64]string{}
	for i := uint64(0); i < 30; i++ {
		m[i*1000] = "v"
	}
	first, err := crypto.Marshal(m)
	require.NoError(t, err)
	for i := 0; i < 20; i++ {
		again, err := crypto.Marshal(m)
		require.NoError(t, err)
		require.Equal(t, first, again)
	}
	var back map[uint64]string
	require.NoError(t, crypto.UnmarshalCanonical(first, &back))
	require.Equal(t, m, back)

	_, err = crypto.Marshal(make(chan int))
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "crypto: "), err.Error())
	require.False(t, errors.Is(err, crypto.ErrOversize))
}
