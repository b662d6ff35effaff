package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The digest of the whole store (docs/protocol.md change 69, rule 2): the
// XOR of the tags of every value outside store.wal, and their number, kept
// in store.wal and updated in the same bbolt transaction as the values.
// Each put takes out the old value's tag, as stored, and puts in the new
// one's; a delete takes out the old one's. Open recomputes both over the
// whole file: a page that a lost write left stale holds an older version of
// its values, whose tags verify, but the digest of the file no longer
// matches the one the last transaction stored.
//
// store.wal itself holds, each value sealed like any other but outside the
// digest:
//
//	"applied"  the seq (8 bytes, big-endian) of the last WAL record whose
//	           ops are in bbolt
//	"digest"   the XOR of the tags (16 bytes) ‖ the number of values (8
//	           bytes, big-endian)
//	"format"   formatVersion (1 byte): the file is sealed; a file without
//	           it was written before change 69 (see migrate.go)
const (
	walAppliedKey = "applied"
	walDigestKey  = "digest"
	walFormatKey  = "format"
	formatVersion = 1
	digestLen     = tagLen + 8
)

// digest is the summary of every value outside store.wal.
type digest struct {
	xor   [tagLen]byte
	count uint64
}

func (d *digest) add(tag []byte) {
	for i := range d.xor {
		d.xor[i] ^= tag[i]
	}
	d.count++
}

func (d *digest) remove(tag []byte) {
	for i := range d.xor {
		d.xor[i] ^= tag[i]
	}
	d.count--
}

func (d digest) encode() []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, digestLen), d.xor[:]...), d.count)
}

func decodeDigest(b []byte) (d digest, ok bool) {
	if len(b) != digestLen {
		return d, false
	}
	copy(d.xor[:], b)
	d.count = binary.BigEndian.Uint64(b[tagLen:])
	return d, true
}

func (d digest) String() string { return fmt.Sprintf("%x over %d values", d.xor, d.count) }

// fileState is what store.wal says of the bbolt file.
type fileState struct {
	applied uint64
	digest  digest
}

// walPrefix is the seal prefix of store.wal's own keys.
var walPrefix = sealPrefix(walBucket)

// readFileState reads store.wal, checking the tag of each of its values.
// sealed is false for a file written before change 69 (no format mark);
// then only applied is read, unsealed.
func readFileState(tx *bolt.Tx, file string, sl *sealer) (st fileState, sealed bool, err error) {
	b := tx.Bucket([]byte(walBucket))
	if b == nil {
		return st, false, nil
	}
	bad := func(key, reason string) error {
		return &IntegrityError{File: file, Bucket: walBucket, Key: []byte(key), Reason: reason}
	}
	own := func(key string) ([]byte, error) {
		stored := b.Get([]byte(key))
		if stored == nil {
			return nil, bad(key, "missing")
		}
		v, ok := sl.open(walPrefix, []byte(key), stored)
		if !ok {
			return nil, badValue(file, walBucket, []byte(key), stored)
		}
		return v, nil
	}
	if b.Get([]byte(walFormatKey)) == nil {
		// Written before change 69: applied is 8 bytes, unsealed.
		if v := b.Get([]byte(walAppliedKey)); v != nil {
			if len(v) != 8 {
				return st, false, bad(walAppliedKey, fmt.Sprintf("%d bytes in a file without the format mark", len(v)))
			}
			st.applied = binary.BigEndian.Uint64(v)
		}
		return st, false, nil
	}
	v, err := own(walFormatKey)
	if err != nil {
		return st, true, err
	}
	if len(v) != 1 || v[0] != formatVersion {
		return st, true, bad(walFormatKey, fmt.Sprintf("format %x, this version reads %d", v, formatVersion))
	}
	if v, err = own(walAppliedKey); err != nil {
		return st, true, err
	}
	if len(v) != 8 {
		return st, true, bad(walAppliedKey, fmt.Sprintf("%d bytes, want 8", len(v)))
	}
	st.applied = binary.BigEndian.Uint64(v)
	if v, err = own(walDigestKey); err != nil {
		return st, true, err
	}
	var ok bool
	if st.digest, ok = decodeDigest(v); !ok {
		return st, true, bad(walDigestKey, fmt.Sprintf("%d bytes, want %d", len(v), digestLen))
	}
	return st, true, nil
}

// readSealedState is readFileState for a file that must be sealed: after
// Open, every file is.
func readSealedState(tx *bolt.Tx, file string, sl *sealer) (fileState, error) {
	st, sealed, err := readFileState(tx, file, sl)
	if err == nil && !sealed {
		err = &IntegrityError{File: file, Bucket: walBucket, Key: []byte(walFormatKey), Reason: "the format mark is gone"}
	}
	return st, err
}

// putFileState stores st in store.wal, sealed, with the format mark.
func putFileState(tx *bolt.Tx, st fileState, sl *sealer) error {
	b, err := tx.CreateBucketIfNotExists([]byte(walBucket))
	if err != nil {
		return fmt.Errorf("bucket %q: %w", walBucket, err)
	}
	for _, kv := range [...]struct {
		key   string
		value []byte
	}{
		{walFormatKey, []byte{formatVersion}},
		{walAppliedKey, binary.BigEndian.AppendUint64(nil, st.applied)},
		{walDigestKey, st.digest.encode()},
	} {
		if err := b.Put([]byte(kv.key), sl.seal(walPrefix, []byte(kv.key), kv.value)); err != nil {
			return fmt.Errorf("%s/%s: %w", walBucket, kv.key, err)
		}
	}
	return nil
}

// sealedTx applies ops in one bbolt write transaction, sealing every value
// and keeping the digest in step; finish stores the digest and applied in
// store.wal, in the same transaction. Every bbolt write of the store's
// values goes through it (checkpoints, large batches, replay).
type sealedTx struct {
	tx     *bolt.Tx
	file   string
	sealer *sealer
	// state is store.wal's as the transaction began, updated by every op.
	// INVARIANT: state.digest is the digest of the values in tx.
	state   fileState
	buckets map[string]*sealedBucket
}

type sealedBucket struct {
	b      *bolt.Bucket
	prefix []byte
}

// beginSealed starts sealing ops in tx; it reads store.wal, whose values
// must match their tags.
func beginSealed(tx *bolt.Tx, file string) (*sealedTx, error) {
	sl := newSealer()
	st, err := readSealedState(tx, file, sl)
	if err != nil {
		return nil, err
	}
	return &sealedTx{tx: tx, file: file, sealer: sl, state: st, buckets: make(map[string]*sealedBucket)}, nil
}

func (w *sealedTx) bucket(name string, create bool) (*sealedBucket, error) {
	if b, ok := w.buckets[name]; ok {
		return b, nil
	}
	var b *bolt.Bucket
	if create {
		var err error
		if b, err = w.tx.CreateBucketIfNotExists([]byte(name)); err != nil {
			return nil, fmt.Errorf("bucket %q: %w", name, err)
		}
	} else if b = w.tx.Bucket([]byte(name)); b == nil {
		return nil, nil // deleting from a missing bucket: nothing to do
	}
	sb := &sealedBucket{b: b, prefix: sealPrefix(name)}
	w.buckets[name] = sb
	return sb, nil
}

// apply applies ops in order. Applying a sequence of ops twice leaves the
// same state as applying it once (each key ends with its last op, and the
// digest follows the values), which is what makes replaying records
// already in bbolt harmless.
func (w *sealedTx) apply(ops []Op) error {
	for _, op := range ops {
		if op.Bucket == walBucket {
			return fmt.Errorf("%v: %w: bucket %q is reserved", op, ErrInvalid, walBucket)
		}
		sb, err := w.bucket(op.Bucket, !op.Delete)
		if err != nil {
			return err
		}
		if sb == nil {
			continue
		}
		if old := sb.b.Get(op.Key); old != nil {
			if len(old) < tagLen {
				return badValue(w.file, op.Bucket, op.Key, old)
			}
			w.state.digest.remove(storedTag(old))
		} else if op.Delete {
			continue
		}
		if op.Delete {
			if err := sb.b.Delete(op.Key); err != nil {
				return fmt.Errorf("%v: %w", op, err)
			}
			continue
		}
		stored := w.sealer.seal(sb.prefix, op.Key, op.Value)
		w.state.digest.add(storedTag(stored))
		if err := sb.b.Put(op.Key, stored); err != nil {
			return fmt.Errorf("%v: %w", op, err)
		}
	}
	return nil
}

// finish stores applied and the digest in store.wal.
func (w *sealedTx) finish(applied uint64) error {
	w.state.applied = applied
	return putFileState(w.tx, w.state, w.sealer)
}

// verifyFile checks the tag of every value in the file, recomputes the
// digest and compares it with the one store.wal holds (rules 1 and 2),
// then runs bbolt's own consistency check, and returns store.wal's state.
// It reads the whole file. bbolt's check finds what tags cannot: a damaged
// key in a branch page, which sends a lookup of a key that exists to the
// wrong leaf (Get would answer "absent" while ForEach finds the key), or a
// page reachable twice or not at all. It runs last: it reads the pages on
// a goroutine of its own, where a fault on a page that points outside the
// file would end the process instead of failing the store (readGuarded);
// the walk over the values reads every page it reaches first.
func verifyFile(tx *bolt.Tx, file string) (fileState, error) {
	sl := newSealer()
	st, err := readSealedState(tx, file, sl)
	if err != nil {
		return st, err
	}
	var sum digest
	err = tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		bucket := string(name)
		prefix := sealPrefix(bucket)
		own := bucket == walBucket
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				return &IntegrityError{File: file, Bucket: bucket, Key: bytes.Clone(k), Reason: "a nested bucket, which the store never writes"}
			}
			if _, ok := sl.open(prefix, k, v); !ok {
				return badValue(file, bucket, k, v)
			}
			if own {
				switch string(k) {
				case walAppliedKey, walDigestKey, walFormatKey:
				default:
					return &IntegrityError{File: file, Bucket: bucket, Key: bytes.Clone(k), Reason: "a key the store never writes"}
				}
				return nil
			}
			sum.add(storedTag(v))
			return nil
		})
	})
	if err != nil {
		return st, err
	}
	if sum != st.digest {
		return st, &IntegrityError{File: file, Reason: fmt.Sprintf(
			"the values' digest is %v, store.wal says %v (a stale page, or a value lost or added)", sum, st.digest)}
	}
	var errs []error
	for err := range tx.Check() {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return st, &IntegrityError{File: file, Reason: "bbolt's check: " + errors.Join(errs...).Error()}
	}
	return st, nil
}

// isIntegrity reports whether err is an integrity finding.
func isIntegrity(err error) bool {
	var ie *IntegrityError
	return errors.As(err, &ie)
}
