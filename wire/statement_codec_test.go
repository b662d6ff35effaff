package wire

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/testseed"
)

// The hand-written Statement codec must be the library's, byte for byte and
// verdict for verdict: these are the references.
func libraryEncode(t testing.TB, st *Statement) []byte {
	b, err := crypto.Marshal(st)
	require.NoError(t, err)
	return b
}

func libraryDecode(b []byte) (*Statement, error) {
	var st Statement
	if err := crypto.UnmarshalCanonical(b, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// codecSeed is the seed of a randomized codec test, new each run unless
// BQ_CODEC_SEED replays one, and the test for its assertions: every failure
// names the seed and the command that replays it.
func codecSeed(t *testing.T) (uint64, testseed.T) {
	t.Helper()
	seed := rand.Uint64()
	if s := os.Getenv("BQ_CODEC_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	return seed, testseed.New(t, seed, fmt.Sprintf("BQ_CODEC_SEED=%d go test ./wire -run '^%s$'", seed, t.Name()))
}

// edgeNumbers sit on both sides of every CBOR head size.
var edgeNumbers = []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64}

func randNumber(r *rand.Rand) uint64 {
	if r.IntN(2) == 0 {
		return edgeNumbers[r.IntN(len(edgeNumbers))]
	}
	return r.Uint64() >> r.IntN(64)
}

func randStatement(r *rand.Rand) *Statement {
	var lock []byte
	for range []int{0, 1, 5, 23, 24, 60, 255, 256, 300}[r.IntN(9)] {
		switch r.IntN(10) {
		case 0:
			lock = append(lock, "é→𝄞"[r.IntN(3):]...) // cut runes: sometimes invalid UTF-8
		case 1:
			lock = append(lock, byte(r.IntN(256)))
		default:
			lock = append(lock, byte('a'+r.IntN(26)))
		}
	}
	st := &Statement{Lock: string(lock), Session: randNumber(r), Attempt: randNumber(r), Phase: Phase(r.IntN(256)), N: randNumber(r)}
	for i := range 32 {
		st.Client[i], st.Cluster[i] = byte(r.Uint32()), byte(r.Uint32())
	}
	if r.IntN(2) == 0 {
		st.JHash = new(Digest)
		st.JHash[r.IntN(32)] = byte(r.Uint32())
	}
	if r.IntN(2) == 0 {
		st.Mode = Mode(r.IntN(256))
	}
	if r.IntN(2) == 0 {
		st.Permits = uint32(randNumber(r))
	}
	return st
}

// mutate damages an encoding in one of the ways a hostile client might.
func mutate(r *rand.Rand, b []byte) []byte {
	b = append([]byte(nil), b...)
	switch r.IntN(6) {
	case 0: // flip bits of one byte
		if len(b) > 0 {
			b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
		}
	case 1: // set one byte to a head-like value
		if len(b) > 0 {
			b[r.IntN(len(b))] = []byte{0x00, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1f, 0x40, 0x58, 0x5f, 0x60, 0x78, 0x7f, 0x80, 0x98, 0xa0, 0xa6, 0xa7, 0xa8, 0xa9, 0xbf, 0xc0, 0xf6, 0xff}[r.IntN(25)]
		}
	case 2: // truncate
		b = b[:r.IntN(len(b)+1)]
	case 3: // insert a byte
		i := r.IntN(len(b) + 1)
		b = append(b[:i], append([]byte{byte(r.Uint32())}, b[i:]...)...)
	case 4: // delete a byte
		if len(b) > 0 {
			i := r.IntN(len(b))
			b = append(b[:i], b[i+1:]...)
		}
	case 5: // append garbage
		b = append(b, byte(r.Uint32()))
	}
	return b
}

// sameVerdict checks the hand-written decoder against the library on b.
func sameVerdict(t testing.TB, b []byte) {
	t.Helper()
	want, wantErr := libraryDecode(b)
	got, err := decodeStatement(b)
	if wantErr != nil {
		require.Error(t, err, "library refuses %x (%v), the codec accepts it", b, wantErr)
		return
	}
	require.NoError(t, err, "library accepts %x, the codec refuses it", b)
	require.Equal(t, want, got)
}

func TestStatementCodecMatchesLibrary(tt *testing.T) {
	seed, t := codecSeed(tt)
	r := rand.New(rand.NewPCG(seed, 0))
	for range 20000 {
		st := randStatement(r)
		b := appendStatement(nil, st)
		require.Equal(t, libraryEncode(t, st), b, "%+v", st)
		sameVerdict(t, b)
		for range 4 {
			sameVerdict(t, mutate(r, b))
		}
	}
}

func FuzzStatementCodec(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 32 {
		f.Add(appendStatement(nil, randStatement(r)))
	}
	f.Add([]byte{})
	f.Add([]byte{0xa0})
	f.Fuzz(func(t *testing.T, b []byte) { sameVerdict(t, b) })
}

func BenchmarkStatementCodec(b *testing.B) {
	st := &Statement{Lock: "ci/deploy", Session: 7, Attempt: 3, Phase: PhaseTicket, N: 12, JHash: &Digest{1}}
	body := appendStatement(nil, st)
	b.Run("encode/library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = crypto.Marshal(st)
		}
	})
	b.Run("encode/hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = appendStatement(nil, st)
		}
	})
	b.Run("decode/library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := libraryDecode(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeStatement(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
