package store

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The write-ahead log (see the package doc for the whole argument).
//
// Record layout, all integers little-endian:
//
//	off  size  field
//	  0     4  n: payload length in bytes (≥ 1)
//	  4     4  CRC-32C (Castagnoli) of bytes 0..3 and 8..24+n, i.e. of
//	           n, pass, seq and payload
//	  8     8  pass: random id of the pass that wrote the record (≠ 0)
//	 16     8  seq: the record's sequence number (≥ 1)
//	 24     n  payload
//
// Payload: uvarint op count, then per op: one flag byte (1 = delete, 0 =
// put), uvarint bucket length, bucket, uvarint key length, key, and for a
// put only, uvarint value length, value.
//
// The first record of every pass is its marker (docs/protocol.md change
// 69, rule 3): one put of walMarkerKey in walBucket, whose value is the
// bbolt file's applied (8 bytes, big-endian) and digest (digestLen bytes,
// see digest.go) when the pass began. No caller can write walBucket, so no
// other record looks like a marker; replay applies no marker to bbolt.
const (
	walHeaderLen = 24
	// walBucket is the reserved bbolt bucket holding the store's own keys
	// (digest.go).
	walBucket    = "store.wal"
	walMarkerKey = "marker"
	walSuffix    = ".wal"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// record is one acknowledged WAL record whose ops are not in bbolt yet.
type record struct {
	seq     uint64
	size    int64  // bytes it takes in the WAL, header included
	payload []byte // owned by the record; decoded again at checkpoint
}

// walState is the writer's position in the WAL. Only the writer goroutine
// touches it once Open has returned.
type walState struct {
	f    *os.File
	size int64  // capacity in bytes
	off  int64  // where the next record goes
	seq  uint64 // the next record's seq
	pass uint64 // the current pass id; every record of a pass carries it
	// needMarker is set from the start of a pass until its marker is
	// written and synced at offset 0.
	// INVARIANT: needMarker implies off == 0; no record of a pass is
	// written before its marker is on stable storage.
	needMarker bool
}

// newPass starts a new pass at offset 0, whose first record will be its
// marker. The caller guarantees that every record written before is
// applied to bbolt (or was never acknowledged), in a synced transaction.
func (w *walState) newPass() {
	w.off = 0
	w.pass = newPassID()
	w.needMarker = true
}

func newPassID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// encodeMarker encodes the marker of a pass that begins with the bbolt
// file in state st, as a record whose header is left for sealRecord.
func encodeMarker(st fileState) []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+digestLen), st.applied)
	v = append(v, st.digest.encode()...)
	return encodeRecord([]*request{{ops: []Op{{Bucket: walBucket, Key: []byte(walMarkerKey), Value: v}}}})
}

// markerLen is the size of every marker record.
var markerLen = int64(len(encodeMarker(fileState{})))

// decodeMarker returns the state a marker record carries; ok is false if
// the payload is not a marker's.
func decodeMarker(payload []byte) (st fileState, ok bool) {
	ops, err := decodeOps(payload)
	if err != nil || len(ops) != 1 {
		return st, false
	}
	op := ops[0]
	if op.Delete || op.Bucket != walBucket || string(op.Key) != walMarkerKey || len(op.Value) != 8+digestLen {
		return st, false
	}
	st.applied = binary.BigEndian.Uint64(op.Value)
	st.digest, ok = decodeDigest(op.Value[8:])
	return st, ok
}

// encodeRecord encodes the ops of batch as a record whose header is left
// for sealRecord.
func encodeRecord(batch []*request) []byte {
	n, nops := walHeaderLen+binary.MaxVarintLen64, 0
	for _, r := range batch {
		nops += len(r.ops)
		for _, op := range r.ops {
			n += 1 + 3*binary.MaxVarintLen32 + len(op.Bucket) + len(op.Key) + len(op.Value)
		}
	}
	buf := make([]byte, walHeaderLen, n)
	buf = binary.AppendUvarint(buf, uint64(nops))
	for _, r := range batch {
		for _, op := range r.ops {
			var flag byte
			if op.Delete {
				flag = 1
			}
			buf = append(buf, flag)
			buf = binary.AppendUvarint(buf, uint64(len(op.Bucket)))
			buf = append(buf, op.Bucket...)
			buf = binary.AppendUvarint(buf, uint64(len(op.Key)))
			buf = append(buf, op.Key...)
			if !op.Delete {
				buf = binary.AppendUvarint(buf, uint64(len(op.Value)))
				buf = append(buf, op.Value...)
			}
		}
	}
	return buf
}

// sealRecord fills in the header of rec (from encodeRecord).
func sealRecord(rec []byte, pass, seq uint64) {
	binary.LittleEndian.PutUint32(rec[0:], uint32(len(rec)-walHeaderLen))
	binary.LittleEndian.PutUint64(rec[8:], pass)
	binary.LittleEndian.PutUint64(rec[16:], seq)
	binary.LittleEndian.PutUint32(rec[4:], recordCRC(rec))
}

func recordCRC(rec []byte) uint32 {
	return crc32.Update(crc32.Update(0, crcTable, rec[0:4]), crcTable, rec[8:])
}

// decodeOps decodes a payload. The ops' slices point into payload.
func decodeOps(payload []byte) ([]Op, error) {
	bad := errors.New("malformed WAL payload")
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(payload)
		if n <= 0 {
			return 0, false
		}
		payload = payload[n:]
		return v, true
	}
	bytes := func() ([]byte, bool) {
		n, ok := uv()
		if !ok || n > uint64(len(payload)) {
			return nil, false
		}
		b := payload[:n:n]
		payload = payload[n:]
		return b, true
	}
	nops, ok := uv()
	if !ok || nops > uint64(len(payload)) {
		return nil, bad
	}
	ops := make([]Op, 0, nops)
	for range nops {
		if len(payload) == 0 || payload[0] > 1 {
			return nil, bad
		}
		op := Op{Delete: payload[0] == 1}
		payload = payload[1:]
		b, ok1 := bytes()
		k, ok2 := bytes()
		if !ok1 || !ok2 {
			return nil, bad
		}
		op.Bucket, op.Key = string(b), k
		if !op.Delete {
			if op.Value, ok = bytes(); !ok {
				return nil, bad
			}
		}
		ops = append(ops, op)
	}
	if len(payload) != 0 {
		return nil, bad
	}
	return ops, nil
}

// scannedRecord is a valid record found by scanWAL.
type scannedRecord struct {
	off     int64
	pass    uint64
	seq     uint64
	payload []byte // points into the scanned buffer
}

// end is the offset right after the record.
func (r scannedRecord) end() int64 { return r.off + walHeaderLen + int64(len(r.payload)) }

// recordAt returns the record at offset off of buf if it is valid: its
// length fits in buf, its CRC matches, and its pass and seq are not zero.
func recordAt(buf []byte, off int64) (scannedRecord, bool) {
	if off < 0 || off > int64(len(buf)) {
		return scannedRecord{}, false
	}
	rest := buf[off:]
	if len(rest) < walHeaderLen {
		return scannedRecord{}, false
	}
	n := int64(binary.LittleEndian.Uint32(rest[0:]))
	if n < 1 || n > int64(len(rest))-walHeaderLen {
		return scannedRecord{}, false
	}
	rec := rest[:walHeaderLen+n]
	if binary.LittleEndian.Uint32(rec[4:]) != recordCRC(rec) {
		return scannedRecord{}, false
	}
	pass := binary.LittleEndian.Uint64(rec[8:])
	seq := binary.LittleEndian.Uint64(rec[16:])
	if pass == 0 || seq == 0 {
		return scannedRecord{}, false
	}
	return scannedRecord{off: off, pass: pass, seq: seq, payload: rec[walHeaderLen:]}, true
}

// scanWAL returns the valid chain of records at the start of buf (the
// whole WAL file): the record at offset 0, if it is valid (recordAt), then
// each record right after the previous one while it is valid, its pass is
// the first record's and its seq is the previous seq + 1.
func scanWAL(buf []byte) []scannedRecord {
	var out []scannedRecord
	off := int64(0)
	for {
		r, ok := recordAt(buf, off)
		if !ok {
			return out
		}
		pass, seq := r.pass, r.seq
		if len(out) > 0 {
			if prev := out[len(out)-1]; pass != prev.pass || seq != prev.seq+1 {
				return out
			}
		}
		out = append(out, scannedRecord{off: r.off, pass: pass, seq: seq, payload: r.payload})
		off = r.end()
	}
}

// strayRecord looks for rule 4's evidence that a chain ended early: a valid
// record of pass, with a seq above after, starting at or after offset from.
// Candidates are found by their pass id, at offset 8 of a header.
func strayRecord(buf []byte, from int64, pass, after uint64) (scannedRecord, bool) {
	id := binary.LittleEndian.AppendUint64(nil, pass)
	for at := from + 8; at < int64(len(buf)); {
		i := bytes.Index(buf[at:], id)
		if i < 0 {
			break
		}
		if r, ok := recordAt(buf, at+int64(i)-8); ok && r.pass == pass && r.seq > after {
			return r, true
		}
		at += int64(i) + 1
	}
	return scannedRecord{}, false
}

// createWAL creates (or replaces) the WAL at path: a file of size zero
// bytes, written out in full (not sparse, so later overwrites allocate
// nothing) and fsync'd under a temporary name, then renamed into place and
// the directory fsync'd. A WAL file that exists is therefore always fully
// allocated and fully zeroed or written by this package.
func createWAL(path string, size int64) (*os.File, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	zeros := make([]byte, min(size, 1<<20))
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off); err != nil {
			return fail(err)
		}
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// openWAL opens the WAL beside the bbolt file and makes the two agree, in
// this order: it seals a bbolt file written before change 69 (migrate.go);
// checks the tag of every value and the digest (rules 1 and 2); checks the
// bbolt file against the WAL's marker and the WAL's chain for an early end
// (rules 3 and 4); replays into bbolt every valid record not applied yet;
// syncs the bbolt file, so that the marker of the pass that begins
// describes a state on stable storage; and leaves s.w ready for that pass.
// A finding of the checks, and a failed read or sync, fail the store
// (ErrFailed). The caller holds the bbolt file lock, which covers the WAL
// too.
func (s *Store) openWAL(dbCreated bool) error {
	path := s.path + walSuffix
	s.w.size = int64(s.opts.WALSize)
	f, buf, err := s.readWAL(path, dbCreated)
	if err != nil {
		return err
	}
	// bbolt may panic or fault on a damaged page rather than return an
	// error: at Open, that is damage too.
	if err := readGuarded(s.path, func() error { return s.recoverFrom(path, buf) }); err != nil {
		_ = f.Close()
		if isIntegrity(err) {
			return s.fail(err, false)
		}
		return err
	}
	if buf != nil && int64(len(buf)) != s.w.size {
		// Everything valid is in bbolt now: the old WAL holds nothing
		// needed, so it is replaced by one of the configured size.
		_ = f.Close()
		if f, err = createWAL(path, s.w.size); err != nil {
			return fmt.Errorf("store: open %s: create WAL: %w", path, err)
		}
	}
	s.w.f = f
	s.w.newPass()
	return nil
}

// readWAL opens the WAL and reads it whole. It creates an empty one (and
// returns no bytes) if there is none, or if the bbolt file was just created:
// a WAL left beside a missing database belongs to a database that is gone;
// its tail alone must not be replayed into a new one.
func (s *Store) readWAL(path string, dbCreated bool) (*os.File, []byte, error) {
	if dbCreated {
		f, err := createWAL(path, s.w.size)
		if err != nil {
			return nil, nil, fmt.Errorf("store: open %s: create WAL: %w", path, err)
		}
		return f, nil, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if f, err = createWAL(path, s.w.size); err != nil {
			return nil, nil, fmt.Errorf("store: open %s: create WAL: %w", path, err)
		}
		return f, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	buf := make([]byte, fi.Size())
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, fi.Size()), buf); err != nil {
		_ = f.Close()
		return nil, nil, s.fail(fmt.Errorf("store: open %s: read WAL: %w", path, err), false)
	}
	return f, buf, nil
}

// recoverFrom brings the bbolt file up to date with buf, the WAL at path
// (see openWAL), and sets s.w.seq past every seq either file has used.
func (s *Store) recoverFrom(path string, buf []byte) error {
	chain := scanWAL(buf)
	migrated, err := s.sealUnsealed(chain)
	if err != nil {
		return err
	}
	var st fileState
	if err := s.db.View(func(tx *bolt.Tx) (err error) {
		st, err = verifyFile(tx, s.path)
		return err
	}); err != nil {
		return s.fail(err, false)
	}
	if err := checkChain(s.path, path, buf, chain, st, migrated); err != nil {
		return s.fail(err, false)
	}
	applied := st.applied
	last := applied
	var replay []scannedRecord
	for _, r := range chain {
		if r.seq > applied {
			if _, marker := decodeMarker(r.payload); !marker {
				replay = append(replay, r)
			}
		}
		last = max(last, r.seq)
	}
	if len(replay) > 0 {
		if err := s.replay(path, replay); err != nil {
			if isIntegrity(err) {
				return s.fail(err, false)
			}
			return s.writeFailed(fmt.Errorf("store: open %s: replay WAL: %w", path, err))
		}
		s.stats.Recovered = uint64(len(replay))
	}
	// The marker of the next pass describes the file as it is now: that
	// must be on stable storage before the marker is (rule 3). A replay
	// was synced by its commit, but a file left by a process that died in
	// a commit may be in the page cache only.
	if err := s.db.Sync(); err != nil {
		return s.fail(fmt.Errorf("store: open %s: sync: %w", s.path, err), false)
	}
	s.w.seq = last + 1
	return nil
}

// checkChain checks the bbolt file, in state st, against its WAL: buf, and
// chain, the valid chain at its start. migrated says the bbolt file was
// sealed by this Open, so the chain may be of a WAL written before markers
// existed.
//
// Rule 3: the marker that begins the chain vouches for the bbolt file: its
// applied is never below the marker's (bbolt went back: a lost write of
// its meta page), and if equal, the digest is the marker's. A chain with
// records not in bbolt begins with a marker, and no marker is found
// inside a chain.
//
// Rule 4: after the chain's last record, a valid record of the chain's
// pass with a higher seq anywhere further in the WAL means that a record
// in between was damaged: records of a pass are written one after the
// other, each synced before the next is written. The marker of the pass
// at offset 0 may itself be damaged, torn by a crash while it was written
// (no record of its pass exists then), or lost: a lost write of it leaves
// there the marker of the pass before, the same size, and the chain is
// that old marker alone. So the pass ids in the headers where a marker and
// the record after it begin are candidates too, unless they are the
// chain's: a valid record of theirs not in bbolt is damage (every record
// of a pass before the chain's is in bbolt: a pass begins only then).
func checkChain(dbPath, walPath string, buf []byte, chain []scannedRecord, st fileState, migrated bool) error {
	for i, r := range chain {
		m, isMarker := decodeMarker(r.payload)
		switch {
		case isMarker && i > 0:
			return &IntegrityError{File: walPath, Reason: fmt.Sprintf(
				"record %d at offset %d is a marker inside a pass", r.seq, r.off)}
		case isMarker && st.applied < m.applied:
			return &IntegrityError{File: dbPath, Reason: fmt.Sprintf(
				"applied is %d, below the %d of the WAL's marker: the file went back (a lost write)", st.applied, m.applied)}
		case isMarker && st.applied == m.applied && st.digest != m.digest:
			return &IntegrityError{File: dbPath, Reason: fmt.Sprintf(
				"applied is %d as in the WAL's marker, but the values' digest is %v, the marker's %v", st.applied, st.digest, m.digest)}
		case !isMarker && i == 0 && !migrated && chain[len(chain)-1].seq > st.applied:
			return &IntegrityError{File: walPath, Reason: fmt.Sprintf(
				"the pass at offset 0 has records not in bbolt (up to %d) but no marker", chain[len(chain)-1].seq)}
		}
	}
	early := func(after string, r scannedRecord) error {
		return &IntegrityError{File: walPath, Reason: fmt.Sprintf(
			"the chain of records ends early (%s), but record %d of its pass is at offset %d: a record in between is damaged",
			after, r.seq, r.off)}
	}
	if n := len(chain); n > 0 {
		c := chain[n-1]
		if r, ok := strayRecord(buf, c.end(), c.pass, c.seq); ok {
			return early(fmt.Sprintf("after record %d at offset %d", c.seq, c.off), r)
		}
	}
	for _, at := range []int64{8, markerLen + 8} {
		if at+8 > int64(len(buf)) {
			continue
		}
		pass := binary.LittleEndian.Uint64(buf[at:])
		if pass == 0 || len(chain) > 0 && pass == chain[0].pass {
			continue
		}
		if r, ok := strayRecord(buf, 0, pass, st.applied); ok {
			return &IntegrityError{File: walPath, Reason: fmt.Sprintf(
				"the chain of records ends early (%d records of another pass from offset 0), but record %d of pass %x, "+
					"not in bbolt, is at offset %d: the marker of its pass is damaged or lost", len(chain), r.seq, pass, r.off)}
		}
	}
	return nil
}

// replay applies the ops of recs (records of the WAL at path) and their
// last seq in one synced bbolt transaction.
func (s *Store) replay(path string, recs []scannedRecord) error {
	tx, err := s.db.Begin(true)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	w, err := beginSealed(tx, s.path)
	if err != nil {
		return err
	}
	for _, r := range recs {
		ops, err := decodeOps(r.payload)
		if err != nil {
			// The writer never writes such a record, and its CRC matched.
			return &IntegrityError{File: path, Reason: fmt.Sprintf("record %d at offset %d: %v", r.seq, r.off, err)}
		}
		if err := w.apply(ops); err != nil {
			return err
		}
	}
	if err := w.finish(recs[len(recs)-1].seq); err != nil {
		return err
	}
	return tx.Commit()
}

// writeMarker writes the marker that begins the current pass (rule 3) at
// offset 0 and syncs it, before any record of the pass is written, so that
// a record of the pass is never on the disk without its marker before it.
// It describes the bbolt file as the last synced transaction left it.
//
// INVARIANT: pending is empty when a pass begins (every record of the
// earlier passes is in bbolt: see newPass), and only the writer adds to
// it, so no checkpoint changes the file while the marker is written.
func (s *Store) writeMarker() error {
	var st fileState
	if err := s.db.View(func(tx *bolt.Tx) error {
		return readGuarded(s.path, func() (err error) {
			st, err = readSealedState(tx, s.path, newSealer())
			return err
		})
	}); err != nil {
		if isIntegrity(err) {
			return s.fail(err, false)
		}
		return fmt.Errorf("store: read %s: %w", walBucket, err)
	}
	rec := encodeMarker(st)
	sealRecord(rec, s.w.pass, s.w.seq)
	if _, err := s.w.f.WriteAt(rec, 0); err != nil {
		return s.writeFailed(fmt.Errorf("store: write WAL marker: %w", err))
	}
	if err := s.syncWAL(); err != nil {
		return s.fail(fmt.Errorf("store: sync WAL marker: %w", err), false)
	}
	s.w.off = int64(len(rec))
	s.w.seq++
	s.w.needMarker = false
	return nil
}

// checkpoint applies every record pending when it starts to bbolt in one
// synced transaction that also records the last one's seq, then drops
// them from pending. On a lack of space they stay pending (they are still
// in the WAL) and the error is returned without the "store: " prefix, for
// the caller to wrap; any other failure fails the store. Every bbolt write
// transaction runs under ckptMu.
func (s *Store) checkpoint() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	s.mu.Lock()
	failure := s.failure
	recs := s.pending[:len(s.pending):len(s.pending)]
	s.mu.Unlock()
	if failure != nil {
		return failure
	}
	if len(recs) == 0 {
		return nil
	}
	if err := s.applyRecords(recs); err != nil {
		s.mu.Lock()
		s.stats.FailedCheckpoints++
		s.mu.Unlock()
		switch {
		case isIntegrity(err):
			return s.fail(err, false)
		case isNoSpace(err), errors.Is(err, ErrClosed):
			return err
		}
		return s.fail(fmt.Errorf("store: checkpoint %s: %w", s.path, err), false)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Only the writer adds to pending, and only at its end, so recs is
	// still its prefix.
	var n int64
	for _, r := range recs {
		n += r.size
	}
	s.pendingBytes -= n
	// recs shares pending's array: it is not used after this.
	s.pending = append(s.pending[:0], s.pending[len(recs):]...)
	clear(s.pending[len(s.pending):cap(s.pending)])
	s.stats.Checkpoints++
	return nil
}

func (s *Store) applyRecords(recs []*record) error {
	tx, err := s.db.Begin(true)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	err = readGuarded(s.path, func() error {
		w, err := beginSealed(tx, s.path)
		if err != nil {
			return err
		}
		for _, r := range recs {
			ops, err := decodeOps(r.payload)
			if err == nil {
				err = w.apply(ops)
			}
			if err != nil {
				return fmt.Errorf("apply record %d: %w", r.seq, err)
			}
		}
		return w.finish(recs[len(recs)-1].seq)
	})
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	if h := s.opts.hooks.beforeCheckpoint; h != nil {
		if err := h(); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("commit: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// flush makes sure every acknowledged Commit is in bbolt, for readers.
func (s *Store) flush() error {
	s.mu.Lock()
	n := len(s.pending)
	s.mu.Unlock()
	if n == 0 {
		return nil
	}
	if err := s.checkpoint(); err != nil {
		if errors.Is(err, ErrClosed) {
			return ErrClosed
		}
		if errors.Is(err, ErrFailed) {
			return err
		}
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	return nil
}

// checkpointer applies pending records to bbolt in the background: when
// the writer reports that they pass a quarter of the WAL, and every
// CheckpointInterval. After a lack of space it waits for the next tick
// before retrying, whatever the writer reports; once the store has failed,
// it stops.
func (s *Store) checkpointer() {
	defer close(s.ckptDone)
	t := time.NewTicker(s.opts.CheckpointInterval)
	defer t.Stop()
	failed := false
	for {
		select {
		case <-s.quit:
			return
		case <-s.failed:
			return
		case <-s.ckptWake:
			if failed {
				continue
			}
		case <-t.C:
		}
		s.mu.Lock()
		n := len(s.pending)
		s.mu.Unlock()
		if n == 0 {
			failed = false
			continue
		}
		err := s.checkpoint()
		failed = err != nil
		if failed && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFailed) {
			s.log.Error("store: checkpoint failed; the records stay in the WAL and are retried",
				"records", n, "err", err)
		}
	}
}
