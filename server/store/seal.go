package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
)

// Sealed values (docs/protocol.md change 69, rule 1). Every value the
// store keeps in bbolt is stored as value ‖ tag, where
//
//	tag = SHA-256(sealDomain ‖ uvarint len(bucket) ‖ bucket ‖
//	              uvarint len(key) ‖ key ‖ value)[:tagLen]
//
// so a value that changed, or that sits under another key or bucket than
// the one it was written for (a misdirected write), or that was cut short,
// no longer matches its tag. The tag is no secret: it guards against the
// disk, not against anyone who can write the file.
const (
	sealDomain = "bq.store.seal.v1"
	tagLen     = 16
)

// sealPrefix is the part of a tag's input that names the bucket, the same
// for every value of the bucket.
func sealPrefix(bucket string) []byte {
	p := make([]byte, 0, len(sealDomain)+binary.MaxVarintLen64+len(bucket))
	p = append(p, sealDomain...)
	p = binary.AppendUvarint(p, uint64(len(bucket)))
	return append(p, bucket...)
}

// sealer computes tags with one reusable hash. It is not safe for
// concurrent use.
type sealer struct {
	h   hash.Hash
	buf [sha256.Size]byte
	n   [binary.MaxVarintLen64]byte
}

func newSealer() *sealer { return &sealer{h: sha256.New()} }

// tag computes the tag of value stored under key in the bucket of prefix
// (from sealPrefix). The result is valid until the next call.
func (s *sealer) tag(prefix, key, value []byte) []byte {
	s.h.Reset()
	s.h.Write(prefix)
	s.h.Write(s.n[:binary.PutUvarint(s.n[:], uint64(len(key)))])
	s.h.Write(key)
	s.h.Write(value)
	return s.h.Sum(s.buf[:0])[:tagLen]
}

// seal returns value ‖ tag in a new slice: what bbolt stores.
func (s *sealer) seal(prefix, key, value []byte) []byte {
	out := make([]byte, len(value), len(value)+tagLen)
	copy(out, value)
	return append(out, s.tag(prefix, key, value)...)
}

// open checks a stored value against its tag and returns the value
// without it (a subslice of stored). ok is false if stored is too short to
// hold a tag or the tag does not match.
func (s *sealer) open(prefix, key, stored []byte) (value []byte, ok bool) {
	if len(stored) < tagLen {
		return nil, false
	}
	value = stored[:len(stored)-tagLen]
	return value, bytes.Equal(stored[len(stored)-tagLen:], s.tag(prefix, key, value))
}

// storedTag is the tag part of a stored value, as stored (not checked).
func storedTag(stored []byte) []byte { return stored[len(stored)-tagLen:] }

// IntegrityError is what the store's own checks find when the disk changed
// something: a value that does not match its tag, a digest, a WAL marker or
// a WAL chain that disagrees with the files. It matches ErrCorrupt; the
// store fails for good when it finds one (see ErrFailed), so every error
// returned with it matches ErrFailed too. The server names File, Bucket and
// Key in what it logs.
type IntegrityError struct {
	// File is the damaged file: the bbolt file or its WAL.
	File string
	// Bucket and Key name the damaged value; empty when the finding is
	// about the file as a whole.
	Bucket string
	Key    []byte
	// Reason says what does not match.
	Reason string
}

func (e *IntegrityError) Error() string {
	if e.Bucket == "" && e.Key == nil {
		return fmt.Sprintf("store: %s is corrupt: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("store: %s is corrupt: bucket %q key %x: %s", e.File, e.Bucket, e.Key, e.Reason)
}

// Is makes an IntegrityError match ErrCorrupt.
func (e *IntegrityError) Is(target error) bool { return target == ErrCorrupt }

// badValue is the IntegrityError of a stored value that does not match its
// tag. key is copied (it may point into bbolt's memory map).
func badValue(file, bucket string, key, stored []byte) *IntegrityError {
	reason := "the value does not match its tag"
	if len(stored) < tagLen {
		reason = fmt.Sprintf("the value has %d bytes, too short for its tag", len(stored))
	}
	return &IntegrityError{File: file, Bucket: bucket, Key: bytes.Clone(key), Reason: reason}
}
