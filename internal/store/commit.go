package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrInvalid is matched (errors.Is) by every error about a malformed
// argument: an empty or too long bucket name or key, a value over
// MaxValueLen, a Commit over the batch caps.
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
// share transactions and fsyncs. Ops of one Commit are applied in order, and
// Commits that do not overlap in time are applied in the order they were
// called. The op slices must not change until Commit returns. A Commit with
// no ops returns nil at once.
//
// If ctx ends before the writer has taken the Commit into a transaction,
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
	if len(ops) == 0 {
		s.mu.Unlock()
		return nil
	}
	s.queue = append(s.queue, r)
	s.mu.Unlock()

	select {
	case s.wake <- struct{}{}:
	default: // a token is already there; the writer will see the queue
	}

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

// writer is the only goroutine that writes to the file. It takes whatever
// is queued, commits it as one transaction, answers every Commit in it, and
// repeats; when the queue is empty it sleeps until a Commit or Close.
func (s *Store) writer() {
	defer close(s.writerDone)
	var batch []*request
	for {
		batch = s.take(batch[:0])
		if len(batch) == 0 {
			select {
			case <-s.wake:
				continue
			case <-s.quit:
				// INVARIANT: Close emptied the queue and set closed
				// before closing quit, so no Commit is left waiting.
				return
			}
		}
		s.run(batch)
		clear(batch) // drop references to the callers' ops
	}
}

// take moves the oldest queued requests into batch, as many as fit under
// MaxBatchOps and MaxBatchBytes, and marks them taken.
func (s *Store) take(batch []*request) []*request {
	s.mu.Lock()
	defer s.mu.Unlock()
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

// run commits batch as one transaction and answers each request with the
// outcome.
func (s *Store) run(batch []*request) {
	if h := s.opts.hooks.beforeTxn; h != nil {
		h(len(batch))
	}
	nops := 0
	for _, r := range batch {
		nops += len(r.ops)
	}

	start := time.Now()
	err := s.apply(batch)
	d := time.Since(start)

	s.mu.Lock()
	if err == nil {
		s.stats.Txns++
		s.stats.Commits += uint64(len(batch))
		s.stats.Ops += uint64(nops)
		s.stats.MaxBatchCommits = max(s.stats.MaxBatchCommits, len(batch))
	} else {
		s.stats.FailedTxns++
	}
	s.mu.Unlock()

	if err != nil {
		s.log.Error("store: transaction failed", "commits", len(batch), "ops", nops, "err", err)
	} else if s.opts.Observe != nil {
		s.opts.Observe(d, nops)
	}
	// INVARIANT: a request is answered nil only here, after apply
	// returned nil, i.e. after bbolt's Commit fsync'd the transaction.
	for _, r := range batch {
		r.done <- err
	}
}

// apply writes every op of batch in one bbolt transaction and commits it
// (bbolt fsyncs the data pages, then the meta page, before Commit returns).
// On any error nothing of batch is applied, except as ErrUncertain says.
func (s *Store) apply(batch []*request) error {
	tx, err := s.db.Begin(true)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	txid := tx.ID() // the id the meta page gets if this commits

	if err := applyOps(tx, batch); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("store: apply: %w", err)
	}
	if h := s.opts.hooks.beforeCommit; h != nil {
		if err := h(); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("store: commit: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		// bbolt rolled back. If the meta page reached the page cache
		// before its fsync failed, readers already see txid.
		if s.visibleTxid() >= txid {
			return fmt.Errorf("%w: %w", ErrUncertain, err)
		}
		return fmt.Errorf("store: commit: %w", err)
	}
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

func applyOps(tx *bolt.Tx, batch []*request) error {
	buckets := make(map[string]*bolt.Bucket)
	bucket := func(name string, create bool) (*bolt.Bucket, error) {
		if b, ok := buckets[name]; ok {
			return b, nil
		}
		var b *bolt.Bucket
		if create {
			var err error
			if b, err = tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return nil, fmt.Errorf("bucket %q: %w", name, err)
			}
		} else if b = tx.Bucket([]byte(name)); b == nil {
			return nil, nil // deleting from a missing bucket: nothing to do
		}
		buckets[name] = b
		return b, nil
	}
	for _, r := range batch {
		for _, op := range r.ops {
			b, err := bucket(op.Bucket, !op.Delete)
			if err != nil {
				return err
			}
			if op.Delete {
				if b != nil {
					if err := b.Delete(op.Key); err != nil {
						return fmt.Errorf("%v: %w", op, err)
					}
				}
				continue
			}
			v := op.Value
			if v == nil {
				v = []byte{}
			}
			if err := b.Put(op.Key, v); err != nil {
				return fmt.Errorf("%v: %w", op, err)
			}
		}
	}
	return nil
}
