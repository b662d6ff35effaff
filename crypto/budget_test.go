package crypto

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

type flood struct {
	Votes [][]*struct {
		A []byte `cbor:"1,keyasint"`
	} `cbor:"1,keyasint"`
}

// A frame of nested nulls must be refused before it is decoded into fifty
// times its size (found by fuzzing-style review of wire.Update).
func TestItemBudgetRefusesNullFloods(t *testing.T) {
	// {1: [ [null × 16000] × 255 ]} ≈ 4 MB of one-byte items.
	var b bytes.Buffer
	b.Write([]byte{0xa1, 0x01, 0x98, 0xff})
	for range 255 {
		b.Write([]byte{0x99, 0x3e, 0x80})
		b.Write(bytes.Repeat([]byte{0xf6}, 16000))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var v flood
	err := Unmarshal(b.Bytes(), &v)
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, ErrTooManyItems)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "refused before allocating")

	// An array that announces more elements than the frame could hold.
	require.ErrorIs(t, Unmarshal([]byte{0x9a, 0x01, 0x00, 0x00, 0x00}, &[]int{}), ErrTooManyItems)
}

// Legitimate dense data (byte strings, as our messages carry) stays within budget.
func TestItemBudgetAllowsDenseData(t *testing.T) {
	vals := make([][]byte, 10000)
	for i := range vals {
		vals[i] = bytes.Repeat([]byte{byte(i)}, 16)
	}
	b, err := Marshal(vals)
	require.NoError(t, err)
	var out [][]byte
	require.NoError(t, Unmarshal(b, &out))
	require.Len(t, out, 10000)
	// Small integers are allowed up to the allowance plus an eighth of the size.
	ints := make([]uint8, 30000)
	b, err = Marshal(ints)
	require.NoError(t, err)
	var got []uint8
	require.NoError(t, Unmarshal(b, &got))
}
