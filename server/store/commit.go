package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrInvalid is matched (errors.Is) by every error about a malformed
// argument: an empty, too long or reserved bucket name, an empty or too
// long key, a value over MaxValueLen, a Commit over the batch caps.
var ErrInvalid = errors.New("store: invalid argument")

// Op is one write: put Value under Key in Bucket (creating the bucket), or,
// if Delete, remove Key from Bucket (a missing key or bucket is not an
// error). A nil Value with Delete false stores an empty value.
type Op struct {
	Bucket string
	Key    []byte
	Value  []byte
	Delete bool
}

func (op Op) String() string {
	if op.Delete {
		return fmt.Sprintf("del %s/%x", op.Bucket, op.Key)
	}
	return fmt.Sprintf("put %s/%x (%d bytes)", op.Bucket, op.Key, len(op.Value))
}

// reqState is where a Commit's request is in its life. Guarded by Store.mu.
type reqState uint8

const (
	queued    reqState = iota // in Store.queue, waiting for the writer
	taken                     // in a batch; its outcome is the batch's
	withdrawn                 // left the queue unapplied (ctx ended, or Close)
)

// request is one Commit call waiting for the writer.
type request struct {
	ops    []Op
	nbytes int // key and value bytes of ops
	// state moves queued → taken or queued → withdrawn, never back.
	state reqState
	// done receives exactly one result: from the writer once taken, or
	// from Close once withdrawn by it. A request withdrawn by its own
	// ctx receives none.
	done chan error
}

// Commit applies ops atomically and durably: when it returns nil every op
// is applied and on stable storage; when it returns an error none is
// acknowledged (see the package doc for ErrUncertain). Concurrent Commits
// share WAL records and fdatasyncs. Ops of one Commit are applied in order, and
// Commits that do not overlap in time are applied in the order they were
// called. The op slices must not change until Commit returns. A Commit with
// no ops returns nil at once.
//
// If ctx ends before the writer has taken the Commit into a batch,
// Commit returns ctx.Err() and the ops are never applied; after that it
// waits for the transaction's outcome.
func (s *Store) Commit(ctx context.Context, ops ...Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	nbytes, err := s.checkOps(ops)
	if err != nil {
		return err
	}
	r := &request{ops: ops, nbytes: nbytes, done: make(chan error, 1)}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.failure != nil {
		s.mu.Unlock()
		return s.failure
	}
	if len(ops) == 0 {
		s.mu.Unlock()
		return nil
	}
	if !s.writing {
		// Nobody is writing, so nothing is queued: write it here rather
		// than hand it to the writer goroutine and wait to be woken (two
		// goroutine switches per Commit for a lone committer such as the
		// server's commit loop).
		s.writing = true
		r.state = taken
		s.leaders.Add(1)
		s.mu.Unlock()
		s.lead(r)
		return <-r.done
	}
	// Someone is writing; whoever it is takes the queue before it stops.
	s.queue = append(s.queue, r)
	s.mu.Unlock()

	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
	}

	s.mu.Lock()
	if r.state == queued {
		r.state = withdrawn
		i := slices.Index(s.queue, r)
		s.queue = slices.Delete(s.queue, i, i+1)
		s.mu.Unlock()
		return ctx.Err()
	}
	s.mu.Unlock()
	// Taken (the writer will answer) or withdrawn by Close (answered).
	return <-r.done
}

// checkOps validates ops against the per-op and per-Commit limits and
// returns their key and value bytes.
func (s *Store) checkOps(ops []Op) (int, error) {
	if len(ops) > s.opts.MaxBatchOps {
		return 0, fmt.Errorf("%w: %d ops in one Commit, limit %d", ErrInvalid, len(ops), s.opts.MaxBatchOps)
	}
	n := 0
	for i, op := range ops {
		if err := checkName(op.Bucket, op.Key); err != nil {
			return 0, fmt.Errorf("%w (op %d)", err, i)
		}
		if len(op.Value) > MaxValueLen {
			return 0, fmt.Errorf("%w: value of %d bytes, limit %d (op %d)", ErrInvalid, len(op.Value), MaxValueLen, i)
		}
		if op.Delete && op.Value != nil {
			return 0, fmt.Errorf("%w: delete with a value (op %d)", ErrInvalid, i)
		}
		n += len(op.Key) + len(op.Value)
	}
	if n > s.opts.MaxBatchBytes {
		return 0, fmt.Errorf("%w: %d bytes in one Commit, limit %d", ErrInvalid, n, s.opts.MaxBatchBytes)
	}
	return n, nil
}

func checkBucket(bucket string) error {
	switch {
	case bucket == "":
		return fmt.Errorf("%w: empty bucket name", ErrInvalid)
	case len(bucket) > MaxBucketLen:
		return fmt.Errorf("%w: bucket name of %d bytes, limit %d", ErrInvalid, len(bucket), MaxBucketLen)
	case bucket == walBucket:
		return fmt.Errorf("%w: bucket name %q is reserved", ErrInvalid, bucket)
	}
	return nil
}

func checkName(bucket string, key []byte) error {
	if err := checkBucket(bucket); err != nil {
		return err
	}
	switch {
	case len(key) == 0:
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes, limit %d", ErrInvalid, len(key), MaxKeyLen)
	}
	return nil
}

// lead makes r durable on the calling goroutine (the Commit that found
// nobody writing), then gives up the writing, or hands it to the writer
// goroutine if Commits queued up meanwhile.
func (s *Store) lead(r *request) {
	defer s.leaders.Done()
	s.run([]*request{r})
	s.mu.Lock()
	handOver := len(s.queue) > 0
	if !handOver {
		s.writing = false
	}
	s.mu.Unlock()
	if handOver {
		// INVARIANT: wake is empty here: a token is only put by a hand-over,
		// which leaves writing set until the writer has emptied the queue.
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// writer is the goroutine that takes over the writing when Commits queue
// up behind a leader: it takes whatever is queued, makes it durable as one
// WAL record, answers every Commit in it, and repeats until the queue is
// empty; then it gives up the writing and sleeps until the next hand-over or
// Close.
func (s *Store) writer() {
	defer close(s.writerDone)
	var batch []*request
	for {
		select {
		case <-s.wake:
		case <-s.quit:
			// INVARIANT: Close emptied the queue and set closed before
			// closing quit, so no Commit is left waiting.
			return
		}
		for {
			batch = s.take(batch[:0])
			if len(batch) == 0 {
				break
			}
			s.run(batch)
			clear(batch) // drop references to the callers' ops
		}
	}
}

// take moves the oldest queued requests into batch, as many as fit under
// MaxBatchOps and MaxBatchBytes, and marks them taken. On an empty queue it
// gives up the writing (writing = false) and returns no batch.
func (s *Store) take(batch []*request) []*request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		s.writing = false
		return batch
	}
	ops, nbytes := 0, 0
	for _, r := range s.queue {
		// INVARIANT: a single request fits the caps (checkOps), so the
		// first one is always taken and a batch never exceeds them.
		if ops+len(r.ops) > s.opts.MaxBatchOps || nbytes+r.nbytes > s.opts.MaxBatchBytes {
			break
		}
		ops += len(r.ops)
		nbytes += r.nbytes
		r.state = taken
		batch = append(batch, r)
	}
	s.queue = slices.Delete(s.queue, 0, len(batch))
	return batch
}

// run makes batch durable and answers each request with the outcome.
func (s *Store) run(batch []*request) {
	if h := s.opts.hooks.beforeTxn; h != nil {
		h(len(batch))
	}
	nops := 0
	for _, r := range batch {
		nops += len(r.ops)
	}

	start := time.Now()
	direct, err := s.persist(batch)
	d := time.Since(start)

	s.mu.Lock()
	if err == nil {
		s.stats.Txns++
		s.stats.Commits += uint64(len(batch))
		s.stats.Ops += uint64(nops)
		s.stats.MaxBatchCommits = max(s.stats.MaxBatchCommits, len(batch))
		if direct {
			s.stats.DirectBatches++
		}
	} else {
		s.stats.FailedTxns++
	}
	s.mu.Unlock()

	if err != nil {
		s.log.Error("store: batch failed", "commits", len(batch), "ops", nops, "err", err)
	} else if s.opts.Observe != nil {
		s.opts.Observe(d, nops)
	}
	// INVARIANT: a request is answered nil only here, after persist
	// returned nil, i.e. after the batch's WAL record was fdatasync'd (or
	// its bbolt transaction committed) and, for a WAL record, after it was
	// added to pending, where readers find it.
	for _, r := range batch {
		r.done <- err
	}
}

// persist makes batch durable: normally as one WAL record, written at the
// current offset and fdatasync'd; direct reports a batch too large for the
// WAL, applied in its own bbolt transaction instead. A pass's first record
// follows its marker, written and synced first. On any error nothing of
// batch is acknowledged, except as ErrUncertain says, and the WAL position
// is unchanged (the next record overwrites the failed one). A write that
// finds no space is refused and may be retried; any other failure fails
// the store for good (failure.go).
func (s *Store) persist(batch []*request) (direct bool, err error) {
	if err := s.Failed(); err != nil {
		return false, err
	}
	rec := encodeRecord(batch)
	size := int64(len(rec))
	if size > s.w.size/2 {
		return true, s.applyDirect(batch)
	}
	if s.w.off+size > s.w.size {
		if err := s.wrap(); err != nil {
			return false, err
		}
	}
	if s.w.needMarker {
		// INVARIANT: a marker and a record of at most half the WAL fit
		// in the WAL.
		if err := s.writeMarker(); err != nil {
			return false, err
		}
	}
	// A write that fails for lack of space is retried: the next record
	// overwrites this one. Any other failure fails the store, which then
	// never overwrites the record: if its bytes landed whole, Open
	// replays it, so the outcome is uncertain.
	writeFailed := func(err error) error {
		err = fmt.Errorf("store: write WAL: %w", err)
		if isNoSpace(err) {
			return err
		}
		return s.fail(err, true)
	}
	if h := s.opts.hooks.beforeCommit; h != nil {
		if err := h(); err != nil {
			return false, writeFailed(err)
		}
	}
	sealRecord(rec, s.w.pass, s.w.seq)
	if _, err := s.w.f.WriteAt(rec, s.w.off); err != nil {
		return false, writeFailed(err)
	}
	if h := s.opts.hooks.afterWrite; h != nil {
		if err := h(); err != nil {
			return false, writeFailed(err)
		}
	}
	// From here on the record may be in the page cache: if the
	// fdatasync fails, it may still reach the disk, and Open would
	// replay it. A failed fdatasync is never retried: the kernel may
	// have dropped the pages and a second one may report success.
	if err := s.syncWAL(); err != nil {
		return false, s.fail(fmt.Errorf("store: sync WAL: %w", err), true)
	}

	s.mu.Lock()
	s.pending = append(s.pending, &record{seq: s.w.seq, size: size, payload: rec[walHeaderLen:]})
	s.pendingBytes += size
	kick := s.pendingBytes >= s.w.size/4
	s.mu.Unlock()
	s.w.off += size
	s.w.seq++
	if kick {
		select {
		case s.ckptWake <- struct{}{}:
		default:
		}
	}
	return false, nil
}

// syncWAL fdatasyncs the WAL, unless a test hook fails it first.
func (s *Store) syncWAL() error {
	if h := s.opts.hooks.beforeSync; h != nil {
		if err := h(); err != nil {
			return err
		}
	}
	return fdatasync(s.w.f)
}

// wrap makes the writer continue at the start of the WAL, once every
// record written so far is applied to bbolt.
func (s *Store) wrap() error {
	if err := s.checkpoint(); err != nil {
		return fmt.Errorf("store: WAL full, checkpoint failed: %w", err)
	}
	// INVARIANT: only the writer adds to pending, so the checkpoint
	// applied every record: none before offset 0 is needed any more.
	s.w.newPass()
	s.mu.Lock()
	s.stats.WALWraps++
	s.mu.Unlock()
	return nil
}

// applyDirect applies a batch too large for the WAL in one synced bbolt
// transaction, after every pending record. The transaction also stores
// the batch's seq as applied, and the writer then starts a new pass at
// offset 0: a record left after the current one by a failed write, whose
// seq this is, can then never be replayed over this batch.
func (s *Store) applyDirect(batch []*request) error {
	if err := s.checkpoint(); err != nil {
		return fmt.Errorf("store: checkpoint before a large batch: %w", err)
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	seq := s.w.seq
	tx, err := s.db.Begin(true)
	if err != nil {
		return s.writeFailed(fmt.Errorf("store: begin: %w", err))
	}
	txid := tx.ID() // the id the meta page gets if this commits

	err = readGuarded(s.path, func() error {
		w, err := beginSealed(tx, s.path)
		if err != nil {
			return err
		}
		for _, r := range batch {
			if err := w.apply(r.ops); err != nil {
				return err
			}
		}
		return w.finish(seq)
	})
	if err != nil {
		_ = tx.Rollback()
		if isIntegrity(err) {
			return s.fail(err, false)
		}
		return fmt.Errorf("store: apply: %w", err)
	}
	if h := s.opts.hooks.beforeCommit; h != nil {
		if err := h(); err != nil {
			_ = tx.Rollback()
			return s.writeFailed(fmt.Errorf("store: commit: %w", err))
		}
	}
	if err := tx.Commit(); err != nil {
		// bbolt rolled back. If the meta page reached the page cache
		// before its fsync failed, readers already see txid, and the
		// batch, seq included, may survive: seq is spent, and the store
		// has failed (a failed fdatasync).
		if s.visibleTxid() >= txid {
			s.w.seq++
			s.w.newPass()
			return s.fail(fmt.Errorf("store: commit: %w", err), true)
		}
		return s.writeFailed(fmt.Errorf("store: commit: %w", err))
	}
	s.w.seq++
	s.w.newPass()
	return nil
}

// visibleTxid is the id of the transaction readers see now.
func (s *Store) visibleTxid() int {
	tx, err := s.db.Begin(false)
	if err != nil {
		return -1
	}
	defer func() { _ = tx.Rollback() }()
	return tx.ID()
}
