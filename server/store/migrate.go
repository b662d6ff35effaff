package store

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// A store of before (docs/protocol.md change 69): a bbolt file written
// before sealed values has no format mark in store.wal. Its first Open
// seals it: every value gets its tag and the digest is computed, in one
// synced transaction, before anything else is read from it. A file that
// Open has just created is sealed the same way (it has no values).
//
// A sealed file that lost its format mark (a damaged key in store.wal)
// must not be sealed again: that would give a damaged value a fresh tag.
// Such a file shows that it was sealed, which a file of before cannot: its
// store.wal holds another key than an 8-byte "applied" (sealed, applied
// has 8+tagLen bytes; the digest and the mark are there), or its WAL's
// chain begins with a marker. Open refuses it.

// sealUnsealed seals the bbolt file if it has no format mark and reports
// whether it did (see above). It fails the store on a file that lost its
// mark.
func (s *Store) sealUnsealed(chain []scannedRecord) (migrated bool, err error) {
	var sealed bool
	if err := s.db.View(func(tx *bolt.Tx) (err error) {
		_, sealed, err = readFileState(tx, s.path, newSealer())
		return err
	}); err != nil {
		return false, s.fail(err, false)
	}
	if sealed {
		return false, nil
	}
	if len(chain) > 0 {
		if _, marker := decodeMarker(chain[0].payload); marker {
			return false, s.fail(&IntegrityError{File: s.path, Bucket: walBucket, Key: []byte(walFormatKey),
				Reason: "the format mark is gone, but the WAL beside the file was written after it"}, false)
		}
	}
	n, err := s.sealAll()
	if err != nil {
		if isIntegrity(err) {
			return false, s.fail(err, false)
		}
		return false, s.writeFailed(fmt.Errorf("store: open %s: seal the values: %w", s.path, err))
	}
	s.stats.Sealed = n
	return true, nil
}

// sealAll seals every value of an unsealed file and stores its digest and
// format mark, in one synced transaction; it returns how many values it
// sealed.
func (s *Store) sealAll() (uint64, error) {
	tx, err := s.db.Begin(true)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	sl := newSealer()
	st, _, err := readFileState(tx, s.path, sl) // applied, unsealed
	if err != nil {
		return 0, err
	}
	var names [][]byte
	if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		names = append(names, bytes.Clone(name))
		return nil
	}); err != nil {
		return 0, err
	}
	type pair struct{ k, v []byte }
	for _, name := range names {
		bucket := string(name)
		b := tx.Bucket(name)
		// Collected first: bbolt does not allow a put while a cursor of
		// the bucket walks it.
		var pairs []pair
		if err := b.ForEach(func(k, v []byte) error {
			switch {
			case v == nil:
				return &IntegrityError{File: s.path, Bucket: bucket, Key: bytes.Clone(k), Reason: "a nested bucket, which the store never writes"}
			case bucket == walBucket && string(k) != walAppliedKey:
				return &IntegrityError{File: s.path, Bucket: bucket, Key: bytes.Clone(k),
					Reason: "a key of a sealed file, in a file without the format mark"}
			}
			pairs = append(pairs, pair{bytes.Clone(k), bytes.Clone(v)})
			return nil
		}); err != nil {
			return 0, err
		}
		if bucket == walBucket {
			continue // putFileState seals applied
		}
		prefix := sealPrefix(bucket)
		for _, p := range pairs {
			stored := sl.seal(prefix, p.k, p.v)
			st.digest.add(storedTag(stored))
			if err := b.Put(p.k, stored); err != nil {
				return 0, fmt.Errorf("bucket %q key %x: %w", bucket, p.k, err)
			}
		}
	}
	if err := putFileState(tx, st, sl); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return st.digest.count, nil
}
