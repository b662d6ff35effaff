package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

func TestReadFrame(t *testing.T) {
	for _, size := range []int{0, 1, readChunk - 1, readChunk, readChunk + 1, 5*readChunk + 7} {
		payload := bytes.Repeat([]byte{0x5a}, size)
		got, err := readFrame(bytes.NewReader(appendFrame(nil, payload)), 6*readChunk)
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("size %d: got %d bytes, %v", size, len(got), err)
		}
	}
	// Over the limit: refused from the header alone.
	hdr := binary.BigEndian.AppendUint32(nil, 1001)
	if _, err := readFrame(bytes.NewReader(hdr), 1000); !errors.Is(err, errFrameTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	// Every truncation of a frame is an unexpected EOF (or a clean EOF before any byte).
	frame := appendFrame(nil, bytes.Repeat([]byte{1}, 3*readChunk))
	for _, cut := range []int{0, 2, 4, 5, readChunk, len(frame) - 1} {
		_, err := readFrame(bytes.NewReader(frame[:cut]), len(frame))
		want := io.ErrUnexpectedEOF
		if cut == 0 {
			want = io.EOF
		}
		if !errors.Is(err, want) {
			t.Fatalf("cut at %d: %v, want %v", cut, err, want)
		}
	}
}

// A peer that announces a large frame and sends little makes readFrame hold little.
func TestReadFrameAllocatesAsBytesArrive(t *testing.T) {
	const announced = 4 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := io.MultiReader(bytes.NewReader(binary.BigEndian.AppendUint32(nil, announced)), bytes.NewReader(make([]byte, 100)))
	if _, err := readFrame(r, announced); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes for a frame of which 100 bytes arrived", grew)
	}
}
