// Package cborx reads and writes the few CBOR items that bq encodes by hand
// on its hot paths (signed statement bodies, signatures, public keys), where
// the reflection of github.com/fxamacker/cbor costs more than the work.
// Everything else goes through that library; the hand-written codecs are
// tested against it (wire/statement_codec_test.go, crypto/codec_hand_test.go).
package cborx

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// CBOR major types, in the high three bits of a head.
const (
	Uint  byte = 0 << 5
	Bytes byte = 2 << 5
	Text  byte = 3 << 5
	Array byte = 4 << 5
	Map   byte = 5 << 5
)

var typeNames = [8]string{"an unsigned integer", "a negative integer", "a byte string", "a text string", "an array", "a map", "a tag", "a simple value or float"}

// ErrShort is a head or string that runs past the end of the input.
var ErrShort = errors.New("cbor: unexpected end of input")

// WrongType says that an item of type got came where one of type want belongs.
func WrongType(what string, got, want byte) error {
	return fmt.Errorf("cbor: %s is %s, want %s", what, typeNames[got>>5], typeNames[want>>5])
}

// AppendHead appends the head of major type major with argument v, in its
// shortest form (as deterministic encoding requires).
func AppendHead(dst []byte, major byte, v uint64) []byte {
	switch {
	case v < 24:
		return append(dst, major|byte(v))
	case v <= 0xff:
		return append(dst, major|24, byte(v))
	case v <= 0xffff:
		return binary.BigEndian.AppendUint16(append(dst, major|25), uint16(v))
	case v <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(dst, major|26), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, major|27), v)
}

// Reader reads heads and strings from B, from Off on.
type Reader struct {
	B   []byte
	Off int
}

// Head reads one head: its major type and argument. Indefinite lengths and
// the reserved values of the additional information are refused; a head in
// a longer form than needed is read as it is (a caller that needs the
// deterministic form compares with a re-encoding).
func (r *Reader) Head() (major byte, v uint64, err error) {
	if r.Off >= len(r.B) {
		return 0, 0, ErrShort
	}
	ib := r.B[r.Off]
	r.Off++
	major, info := ib&0xe0, ib&0x1f
	if info < 24 {
		return major, uint64(info), nil
	}
	if info > 27 {
		return 0, 0, fmt.Errorf("cbor: head 0x%02x (indefinite or reserved) is not allowed here", ib)
	}
	n := 1 << (info - 24)
	if len(r.B)-r.Off < n {
		return 0, 0, ErrShort
	}
	for _, c := range r.B[r.Off : r.Off+n] {
		v = v<<8 | uint64(c)
	}
	r.Off += n
	return major, v, nil
}

// Uint reads an unsigned integer; what names it in an error.
func (r *Reader) Uint(what string) (uint64, error) {
	major, v, err := r.Head()
	if err == nil && major != Uint {
		err = WrongType(what, major, Uint)
	}
	return v, err
}

// String reads a definite-length string of major type major (Bytes or
// Text) and returns it as a slice of B; what names it in an error.
func (r *Reader) String(what string, major byte) ([]byte, error) {
	m, n, err := r.Head()
	if err != nil {
		return nil, err
	}
	if m != major {
		return nil, WrongType(what, m, major)
	}
	if n > uint64(len(r.B)-r.Off) {
		return nil, ErrShort
	}
	s := r.B[r.Off : r.Off+int(n)]
	r.Off += int(n)
	return s, nil
}

// Null is the CBOR null, which the library writes for a nil byte slice.
const Null byte = 0xf6

// BytesOrNull reads a byte string, or a null as nil (how the library
// encodes a nil slice); what names it in an error.
func (r *Reader) BytesOrNull(what string) ([]byte, error) {
	if r.Off < len(r.B) && r.B[r.Off] == Null {
		r.Off++
		return nil, nil
	}
	return r.String(what, Bytes)
}

// ArrayOf reads the head of an array of exactly n items.
func (r *Reader) ArrayOf(what string, n uint64) error {
	m, v, err := r.Head()
	if err != nil {
		return err
	}
	if m != Array {
		return WrongType(what, m, Array)
	}
	if v != n {
		return fmt.Errorf("cbor: %s is an array of %d items, want %d", what, v, n)
	}
	return nil
}

// End reports an error unless everything was read.
func (r *Reader) End(what string) error {
	if r.Off != len(r.B) {
		return fmt.Errorf("cbor: %d trailing bytes after %s", len(r.B)-r.Off, what)
	}
	return nil
}
