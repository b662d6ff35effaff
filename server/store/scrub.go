package store

import (
	"bytes"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The scrub (docs/protocol.md change 69, rule 6): the whole bbolt file,
// read again and again in small chunks, checking the tag of every value,
// so that cold data that rots is found before a restart needs it. The
// caller (the server) sets the pace: it calls Scrub in the background, as
// often as its rate allows. Each chunk is a read transaction of its own: a
// long one would pin the pages that the writes meanwhile free, and the
// file would grow.
//
// A pass visits the buckets in order and the keys of each in order,
// resuming after the last key checked, so each value present for the
// whole pass is checked exactly once in it; a value written during the
// pass is checked in it if it lands after the scrub's position, else in
// the next pass. At the end of a pass, if the bbolt file had no write
// transaction during the whole pass (no checkpoint or large batch
// committed: every chunk read the same version of the file), the tags the
// pass saw are summed into the digest of rule 2 and compared with the one
// stored, so a stale page is found without a restart too. If the file
// changed during the pass, the comparison is skipped: chunks of different
// versions do not add up to the digest of any one version.

// ScrubProgress says where the scrub stands.
type ScrubProgress struct {
	Passes  uint64 // whole passes over the file completed since Open
	Checked uint64 // values checked in the current pass
	Bytes   uint64 // bytes of values checked since Open
}

// scrubPos is where the scrub stands between two calls of Scrub.
type scrubPos struct {
	// inPass is set from a pass's first chunk to its end.
	inPass bool
	// bucket and key are the last value checked in the pass (bucket nil:
	// none yet); the next chunk resumes right after it.
	bucket, key []byte
	// txid is the version of the bbolt file the pass's first chunk read;
	// changed is set when a later chunk read another one.
	txid    int
	changed bool
	// sum is the digest of the values outside store.wal checked in the
	// pass; it is compared with the stored one at the end of a pass in
	// which the file did not change.
	sum      digest
	progress ScrubProgress
}

// Scrub checks the next at most maxValues values (tags; each value once
// per pass, resuming after the last key checked, across buckets), in one
// read transaction, and returns the progress. A bad tag fails the store
// for good (ErrFailed, ErrCorrupt, *IntegrityError naming file/bucket/key),
// like any read. A failed or closed store returns its error.
//
// A call never runs past the end of a pass: when it checks the pass's last
// value, Passes counts the pass, Checked starts again at 0, and, if the
// file had no write transaction during the pass, the digest of the pass is
// compared with the stored one (a mismatch fails the store like a bad
// tag). Bytes counts the values as stored, tags included. maxValues 0
// checks nothing and returns the progress; a negative one is ErrInvalid.
// Calls are serialized; Scrub does not wait for, nor delay, Commits or
// checkpoints, and reads only what is in the bbolt file (acknowledged
// Commits still only in the WAL are checked once a checkpoint has applied
// them).
func (s *Store) Scrub(maxValues int) (ScrubProgress, error) {
	s.scrubMu.Lock()
	defer s.scrubMu.Unlock()
	pos := &s.scrub
	if maxValues < 0 {
		return pos.progress, fmt.Errorf("%w: scrub %d values", ErrInvalid, maxValues)
	}
	s.mu.Lock()
	closed, failure := s.closed, s.failure
	s.mu.Unlock()
	if closed {
		return pos.progress, ErrClosed
	}
	if failure != nil {
		return pos.progress, failure
	}
	if maxValues == 0 {
		return pos.progress, nil
	}
	tx, err := s.db.Begin(false)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return pos.progress, ErrClosed
	}
	if err != nil {
		return pos.progress, s.fail(fmt.Errorf("store: scrub: begin read: %w", err), false)
	}
	defer func() { _ = tx.Rollback() }()
	if err := readGuarded(s.path, func() error { return s.scrubChunk(tx, pos, maxValues) }); err != nil {
		return pos.progress, s.fail(err, false)
	}
	return pos.progress, nil
}

// scrubChunk checks up to maxValues values of tx after pos, moving pos
// past each, and ends the pass if it reaches the end of the file.
func (s *Store) scrubChunk(tx *bolt.Tx, pos *scrubPos, maxValues int) error {
	if !pos.inPass {
		*pos = scrubPos{inPass: true, txid: tx.ID(), progress: pos.progress}
		pos.progress.Checked = 0
	}
	if tx.ID() != pos.txid {
		pos.changed = true
	}
	sl := newSealer()
	checked := 0
	root := tx.Cursor()
	name, _ := root.First()
	if pos.bucket != nil {
		name, _ = root.Seek(pos.bucket)
	}
	for ; name != nil; name, _ = root.Next() {
		b := tx.Bucket(name)
		if b == nil {
			continue
		}
		bucket, prefix := string(name), sealPrefix(string(name))
		own := bucket == walBucket
		c := b.Cursor()
		k, v := c.First()
		if pos.key != nil && bytes.Equal(name, pos.bucket) {
			if k, v = c.Seek(pos.key); k != nil && bytes.Equal(k, pos.key) {
				k, v = c.Next()
			}
		}
		for ; k != nil; k, v = c.Next() {
			if checked == maxValues {
				return nil // more to come: the pass goes on
			}
			if v == nil {
				return &IntegrityError{File: s.path, Bucket: bucket, Key: bytes.Clone(k),
					Reason: "a nested bucket, which the store never writes"}
			}
			if _, ok := sl.open(prefix, k, v); !ok {
				return badValue(s.path, bucket, k, v)
			}
			if h := s.opts.hooks.scrubbed; h != nil {
				h(bucket, k)
			}
			if !own {
				pos.sum.add(storedTag(v))
			}
			pos.bucket = append(pos.bucket[:0], name...)
			pos.key = append(pos.key[:0], k...)
			checked++
			pos.progress.Checked++
			pos.progress.Bytes += uint64(len(v))
		}
	}
	return s.endScrubPass(tx, pos)
}

// endScrubPass ends the pass pos has just read to the end: it compares the
// pass's digest with the one stored if the file did not change during
// the pass, and counts the pass.
func (s *Store) endScrubPass(tx *bolt.Tx, pos *scrubPos) error {
	if !pos.changed {
		st, err := readSealedState(tx, s.path, newSealer())
		if err != nil {
			return err
		}
		if pos.sum != st.digest {
			return &IntegrityError{File: s.path, Reason: fmt.Sprintf(
				"the scrub's pass summed the values' digest to %v, store.wal says %v (a stale page, or a value lost or added)",
				pos.sum, st.digest)}
		}
	}
	pos.inPass = false
	pos.progress.Passes++
	pos.progress.Checked = 0
	return nil
}
