package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// A Statement is the body every client signs and every server checks, four
// or more times per acquisition on each server and client. Its encoding is
// written out here instead of going through the reflection of the CBOR
// library: appendStatement produces exactly the bytes of crypto.Marshal (core
// deterministic CBOR of the struct tags), and decodeStatement accepts exactly
// what crypto.UnmarshalCanonical accepts, with the same value.
// statement_codec_test.go checks both against the library, on generated
// statements and on arbitrary bytes (FuzzStatementCodec).

// CBOR major types.
const (
	cborUint  = 0 << 5
	cborBytes = 2 << 5
	cborText  = 3 << 5
	cborMap   = 5 << 5
)

// Statement map keys, as in the struct tags of Statement.
const (
	stLock = iota + 1
	stClient
	stSession
	stAttempt
	stPhase
	stN
	stJHash
	stCluster
)

// appendHead appends the CBOR head of major type major with argument v, in
// its shortest form.
func appendHead(dst []byte, major byte, v uint64) []byte {
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

// statementSizeMax bounds a Statement's encoding but its lock name: the
// map head, eight keys, a 9-byte lock name head, three 34-byte strings and
// four 9-byte integers.
const statementSizeMax = 1 + 8 + 9 + 3*34 + 4*9

// appendStatement appends the deterministic CBOR encoding of st.
func appendStatement(dst []byte, st *Statement) []byte {
	pairs := uint64(6)
	if st.N != 0 {
		pairs++
	}
	if st.JHash != nil {
		pairs++
	}
	dst = appendHead(dst, cborMap, pairs)
	dst = appendHead(dst, cborUint, stLock)
	dst = appendHead(dst, cborText, uint64(len(st.Lock)))
	dst = append(dst, st.Lock...)
	dst = appendHead(dst, cborUint, stClient)
	dst = append(appendHead(dst, cborBytes, 32), st.Client[:]...)
	dst = appendHead(dst, cborUint, stSession)
	dst = appendHead(dst, cborUint, st.Session)
	dst = appendHead(dst, cborUint, stAttempt)
	dst = appendHead(dst, cborUint, st.Attempt)
	dst = appendHead(dst, cborUint, stPhase)
	dst = appendHead(dst, cborUint, uint64(st.Phase))
	if st.N != 0 {
		dst = appendHead(dst, cborUint, stN)
		dst = appendHead(dst, cborUint, st.N)
	}
	if st.JHash != nil {
		dst = appendHead(dst, cborUint, stJHash)
		dst = append(appendHead(dst, cborBytes, 32), st.JHash[:]...)
	}
	dst = appendHead(dst, cborUint, stCluster)
	return append(appendHead(dst, cborBytes, 32), st.Cluster[:]...)
}

var errNotCanonicalStatement = errors.New("crypto: decode: body is not in deterministic CBOR form")

// cborReader reads CBOR heads and strings from b.
type cborReader struct {
	b   []byte
	off int
}

// head reads one head: its major type and argument. Indefinite lengths and
// the reserved additional information values are refused.
func (r *cborReader) head() (major byte, v uint64, err error) {
	if r.off >= len(r.b) {
		return 0, 0, errors.New("crypto: decode: unexpected end of statement")
	}
	ib := r.b[r.off]
	r.off++
	major, info := ib&0xe0, ib&0x1f
	if info < 24 {
		return major, uint64(info), nil
	}
	if info > 27 {
		return 0, 0, fmt.Errorf("crypto: decode: CBOR head 0x%02x is not allowed in a statement", ib)
	}
	n := 1 << (info - 24)
	if len(r.b)-r.off < n {
		return 0, 0, errors.New("crypto: decode: unexpected end of statement")
	}
	for _, c := range r.b[r.off : r.off+n] {
		v = v<<8 | uint64(c)
	}
	r.off += n
	return major, v, nil
}

// cborTypes names the CBOR major types, for errors.
var cborTypes = [8]string{"an unsigned integer", "a negative integer", "a byte string", "a text string", "an array", "a map", "a tag", "a simple value or float"}

func wrongType(got, want byte) error {
	return fmt.Errorf("crypto: decode: a statement field is %s, want %s", cborTypes[got>>5], cborTypes[want>>5])
}

func (r *cborReader) uint() (uint64, error) {
	major, v, err := r.head()
	if err == nil && major != cborUint {
		err = wrongType(major, cborUint)
	}
	return v, err
}

// str reads a string of major type major (text or bytes).
func (r *cborReader) str(major byte) ([]byte, error) {
	m, n, err := r.head()
	if err != nil {
		return nil, err
	}
	if m != major {
		return nil, wrongType(m, major)
	}
	if n > uint64(len(r.b)-r.off) {
		return nil, errors.New("crypto: decode: unexpected end of statement")
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

func (r *cborReader) bytes32(dst *[32]byte, what string) error {
	s, err := r.str(cborBytes)
	if err != nil {
		return err
	}
	if len(s) != 32 {
		return fmt.Errorf("wire: %s has %d bytes, want 32", what, len(s))
	}
	copy(dst[:], s)
	return nil
}

// decodeStatement decodes a signed Statement body, which must be exactly
// appendStatement's encoding of what it decodes to.
func decodeStatement(b []byte) (*Statement, error) {
	r := cborReader{b: b}
	major, pairs, err := r.head()
	if err != nil {
		return nil, err
	}
	if major != cborMap {
		return nil, fmt.Errorf("crypto: decode: a statement is a map, not %s", cborTypes[major>>5])
	}
	if pairs > stCluster {
		return nil, errNotCanonicalStatement
	}
	var st Statement
	last := uint64(0)
	for range pairs {
		key, err := r.uint()
		if err != nil {
			return nil, err
		}
		if key <= last || key > stCluster {
			// Out of order, repeated or unknown: not canonical.
			return nil, errNotCanonicalStatement
		}
		last = key
		switch key {
		case stLock:
			s, err := r.str(cborText)
			if err != nil {
				return nil, err
			}
			if !utf8.Valid(s) {
				return nil, errors.New("crypto: decode: invalid UTF-8 in the lock name")
			}
			st.Lock = string(s)
		case stClient:
			err = r.bytes32((*[32]byte)(&st.Client), "client id")
		case stSession:
			st.Session, err = r.uint()
		case stAttempt:
			st.Attempt, err = r.uint()
		case stPhase:
			var v uint64
			if v, err = r.uint(); err == nil && v > 0xff {
				err = fmt.Errorf("crypto: decode: phase %d overflows", v)
			}
			st.Phase = Phase(v)
		case stN:
			st.N, err = r.uint()
		case stJHash:
			st.JHash = new(Digest)
			err = r.bytes32((*[32]byte)(st.JHash), "digest")
		case stCluster:
			err = r.bytes32((*[32]byte)(&st.Cluster), "cluster id")
		}
		if err != nil {
			return nil, err
		}
	}
	if r.off != len(b) {
		return nil, errors.New("crypto: decode: trailing bytes after the statement")
	}
	// Shortest heads, nothing omitted that must be there, nothing there
	// that must be omitted: the one encoding of st.
	if !bytes.Equal(appendStatement(make([]byte, 0, len(b)), &st), b) {
		return nil, errNotCanonicalStatement
	}
	return &st, nil
}
