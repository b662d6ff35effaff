package wire

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/bq-lock/bq/crypto/cborx"
)

// A Statement is the body every client signs and every server checks, four
// or more times per acquisition on each server and client. Its encoding is
// written out here instead of going through the reflection of the CBOR
// library: appendStatement produces exactly the bytes of crypto.Marshal (core
// deterministic CBOR of the struct tags), and decodeStatement accepts exactly
// what crypto.UnmarshalCanonical accepts, with the same value.
// statement_codec_test.go checks both against the library, on generated
// statements and on arbitrary bytes (FuzzStatementCodec).

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
	stMode
	stPermits
)

// statementSizeMax bounds a Statement's encoding but its lock name: the
// map head, ten keys, a 9-byte lock name head, three 34-byte strings and
// six 9-byte integers.
const statementSizeMax = 1 + 10 + 9 + 3*34 + 6*9

// appendStatement appends the deterministic CBOR encoding of st.
func appendStatement(dst []byte, st *Statement) []byte {
	pairs := uint64(6)
	if st.N != 0 {
		pairs++
	}
	if st.JHash != nil {
		pairs++
	}
	if st.Mode != 0 {
		pairs++
	}
	if st.Permits != 0 {
		pairs++
	}
	dst = cborx.AppendHead(dst, cborx.Map, pairs)
	dst = cborx.AppendHead(dst, cborx.Uint, stLock)
	dst = cborx.AppendHead(dst, cborx.Text, uint64(len(st.Lock)))
	dst = append(dst, st.Lock...)
	dst = cborx.AppendHead(dst, cborx.Uint, stClient)
	dst = append(cborx.AppendHead(dst, cborx.Bytes, 32), st.Client[:]...)
	dst = cborx.AppendHead(dst, cborx.Uint, stSession)
	dst = cborx.AppendHead(dst, cborx.Uint, st.Session)
	dst = cborx.AppendHead(dst, cborx.Uint, stAttempt)
	dst = cborx.AppendHead(dst, cborx.Uint, st.Attempt)
	dst = cborx.AppendHead(dst, cborx.Uint, stPhase)
	dst = cborx.AppendHead(dst, cborx.Uint, uint64(st.Phase))
	if st.N != 0 {
		dst = cborx.AppendHead(dst, cborx.Uint, stN)
		dst = cborx.AppendHead(dst, cborx.Uint, st.N)
	}
	if st.JHash != nil {
		dst = cborx.AppendHead(dst, cborx.Uint, stJHash)
		dst = append(cborx.AppendHead(dst, cborx.Bytes, 32), st.JHash[:]...)
	}
	dst = cborx.AppendHead(dst, cborx.Uint, stCluster)
	dst = append(cborx.AppendHead(dst, cborx.Bytes, 32), st.Cluster[:]...)
	if st.Mode != 0 {
		dst = cborx.AppendHead(dst, cborx.Uint, stMode)
		dst = cborx.AppendHead(dst, cborx.Uint, uint64(st.Mode))
	}
	if st.Permits != 0 {
		dst = cborx.AppendHead(dst, cborx.Uint, stPermits)
		dst = cborx.AppendHead(dst, cborx.Uint, uint64(st.Permits))
	}
	return dst
}

var errNotCanonicalStatement = errors.New("crypto: decode: body is not in deterministic CBOR form")

// bytes32 reads a 32-byte string into dst.
func bytes32(r *cborx.Reader, dst *[32]byte, what string) error {
	s, err := r.String(what, cborx.Bytes)
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
	r := cborx.Reader{B: b}
	major, pairs, err := r.Head()
	if err != nil {
		return nil, err
	}
	if major != cborx.Map {
		return nil, cborx.WrongType("a statement", major, cborx.Map)
	}
	if pairs > stPermits {
		return nil, errNotCanonicalStatement
	}
	var st Statement
	last := uint64(0)
	for range pairs {
		key, err := r.Uint("a statement key")
		if err != nil {
			return nil, err
		}
		if key <= last || key > stPermits {
			// Out of order, repeated or unknown: not canonical.
			return nil, errNotCanonicalStatement
		}
		last = key
		switch key {
		case stLock:
			s, err := r.String("the lock name", cborx.Text)
			if err != nil {
				return nil, err
			}
			if !utf8.Valid(s) {
				return nil, errors.New("crypto: decode: invalid UTF-8 in the lock name")
			}
			st.Lock = string(s)
		case stClient:
			err = bytes32(&r, (*[32]byte)(&st.Client), "client id")
		case stSession:
			st.Session, err = r.Uint("the session")
		case stAttempt:
			st.Attempt, err = r.Uint("the attempt")
		case stPhase:
			var v uint64
			if v, err = r.Uint("the phase"); err == nil && v > 0xff {
				err = fmt.Errorf("crypto: decode: phase %d overflows", v)
			}
			st.Phase = Phase(v)
		case stN:
			st.N, err = r.Uint("N")
		case stJHash:
			st.JHash = new(Digest)
			err = bytes32(&r, (*[32]byte)(st.JHash), "digest")
		case stCluster:
			err = bytes32(&r, (*[32]byte)(&st.Cluster), "cluster id")
		case stMode:
			var v uint64
			if v, err = r.Uint("the mode"); err == nil && v > 0xff {
				err = fmt.Errorf("crypto: decode: mode %d overflows", v)
			}
			st.Mode = Mode(v)
		case stPermits:
			var v uint64
			if v, err = r.Uint("the permits"); err == nil && v > 0xffffffff {
				err = fmt.Errorf("crypto: decode: permits %d overflow", v)
			}
			st.Permits = uint32(v)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := r.End("the statement"); err != nil {
		return nil, err
	}
	// Shortest heads, nothing omitted that must be there, nothing there
	// that must be omitted: the one encoding of st.
	if !bytes.Equal(appendStatement(make([]byte, 0, len(b)), &st), b) {
		return nil, errNotCanonicalStatement
	}
	return &st, nil
}
