package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Limits on what one Commit may carry. They keep a single transaction, and
// the memory the writer pins for it, bounded.
const (
	// MaxBucketLen is the longest bucket name, in bytes.
	MaxBucketLen = 255
	// MaxKeyLen is the longest key, in bytes (bbolt's own limit).
	MaxKeyLen = bolt.MaxKeySize
	// MaxValueLen is the largest value, in bytes.
	MaxValueLen = 16 << 20

	// DefaultMaxBatchOps is Options.MaxBatchOps when it is zero.
	DefaultMaxBatchOps = 4096
	// DefaultMaxBatchBytes is Options.MaxBatchBytes when it is zero.
	DefaultMaxBatchBytes = 64 << 20
	// DefaultLockTimeout is Options.LockTimeout when it is zero.
	DefaultLockTimeout = 2 * time.Second
	// DefaultWALSize is Options.WALSize when it is zero.
	DefaultWALSize = 16 << 20
	// MinWALSize and MaxWALSize bound Options.WALSize.
	MinWALSize = 64 << 10
	MaxWALSize = 1 << 30
	// DefaultCheckpointInterval is Options.CheckpointInterval when it is
	// zero.
	DefaultCheckpointInterval = time.Second
)

var (
	// ErrClosed is returned by every method called after Close, and by a
	// Commit still queued when Close ran.
	ErrClosed = errors.New("store: closed")
	// ErrLocked is returned by Open when another process (or another Open in
	// this process) holds the file.
	ErrLocked = errors.New("store: database file is locked by another process")
	// ErrCorrupt is matched by the errors of Open, Check and every read
	// that find a file damaged: not a valid bbolt database, or a finding of
	// the integrity checks (an *IntegrityError). Such an error matches
	// ErrFailed too: the store has failed for good.
	ErrCorrupt = errors.New("store: database file is corrupt")
	// ErrUncertain is matched (errors.Is) by a Commit error whose ops may
	// have reached the disk anyway (the WAL record was written but its
	// fdatasync failed, or a large batch's bbolt transaction failed after
	// its meta page was written): the ops were not acknowledged but may be
	// visible and may survive (see the package doc). Such an error
	// matches ErrFailed too.
	ErrUncertain = errors.New("store: commit outcome uncertain")
)

// Options configures a Store. The zero value is usable.
type Options struct {
	// MaxBatchOps caps the ops in one transaction, and so in one Commit.
	// Zero means DefaultMaxBatchOps.
	MaxBatchOps int
	// MaxBatchBytes caps the key and value bytes in one transaction, and so
	// in one Commit. Zero means DefaultMaxBatchBytes.
	MaxBatchBytes int
	// LockTimeout is how long Open waits for the file lock before returning
	// ErrLocked. Zero means DefaultLockTimeout.
	LockTimeout time.Duration
	// WALSize is the size in bytes of the write-ahead log file beside the
	// database (path + ".wal"), allocated in full when it is created.
	// Zero means DefaultWALSize; otherwise it must be in [MinWALSize,
	// MaxWALSize]. A batch whose record would exceed WALSize/2 skips the
	// WAL and is applied directly to the database.
	WALSize int
	// CheckpointInterval is how often the checkpointer applies the
	// acknowledged records waiting in the WAL to the database (it also
	// runs when they pass a quarter of the WAL, when the writer needs the
	// room, and before reads). Zero means DefaultCheckpointInterval.
	CheckpointInterval time.Duration
	// Logger receives failed batches and checkpoints. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Observe, if set, is called by the writer after each successful
	// batch with its duration and its op count: the fsync latency metric.
	// The duration runs from the moment the batch is encoded to the end of
	// its fdatasync: the WAL write and fdatasync, plus the checkpoint it
	// waited for if the WAL had to wrap around (or the whole bbolt
	// transaction for a batch too large for the WAL). It must be quick (it
	// delays the next batch) and must not call the Store.
	Observe func(d time.Duration, ops int)

	// hooks are fault and scheduling injection points for this package's
	// tests only.
	hooks *testHooks
}

// testHooks are called by the writer and the checkpoint; nil fields are
// skipped.
type testHooks struct {
	// beforeTxn runs after the writer has taken a batch of commits, before
	// it makes it durable. A test blocks here to let Commits queue.
	beforeTxn func(commits int)
	// beforeCommit runs just before the batch's WAL record is written
	// (for a batch too large for the WAL: inside its bbolt transaction,
	// after every op is applied); an error fails the batch as a failed
	// write would: one that isNoSpace is refused and may be retried,
	// any other fails the store.
	beforeCommit func() error
	// afterWrite runs after the WAL record is written, before its
	// fdatasync; an error fails the batch as a write that failed after
	// its bytes landed would (isNoSpace or not, as beforeCommit).
	afterWrite func() error
	// beforeSync runs after a WAL record (or a pass's marker) is
	// written, before its fdatasync; an error fails the batch as a failed
	// fdatasync would: the store fails, ErrUncertain (for a marker: no
	// record of the batch was written yet, the failure is certain).
	beforeSync func() error
	// beforeCheckpoint runs inside a checkpoint's bbolt transaction after
	// every op is applied; an error fails the checkpoint as a failed
	// bbolt commit would (isNoSpace or not, as beforeCommit).
	beforeCheckpoint func() error
	// scrubbed runs for each value Scrub has checked, in the order
	// checked.
	scrubbed func(bucket string, key []byte)
}

func (o Options) validate() error {
	var errs []error
	if o.MaxBatchOps < 0 {
		errs = append(errs, fmt.Errorf("store: Options.MaxBatchOps %d < 0", o.MaxBatchOps))
	}
	if o.MaxBatchBytes < 0 {
		errs = append(errs, fmt.Errorf("store: Options.MaxBatchBytes %d < 0", o.MaxBatchBytes))
	}
	if o.LockTimeout < 0 {
		errs = append(errs, fmt.Errorf("store: Options.LockTimeout %v < 0", o.LockTimeout))
	}
	if o.WALSize != 0 && (o.WALSize < MinWALSize || o.WALSize > MaxWALSize) {
		errs = append(errs, fmt.Errorf("store: Options.WALSize %d not in [%d, %d]", o.WALSize, MinWALSize, MaxWALSize))
	}
	if o.CheckpointInterval < 0 {
		errs = append(errs, fmt.Errorf("store: Options.CheckpointInterval %v < 0", o.CheckpointInterval))
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.MaxBatchOps == 0 {
		o.MaxBatchOps = DefaultMaxBatchOps
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.WALSize == 0 {
		o.WALSize = DefaultWALSize
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.hooks == nil {
		o.hooks = &testHooks{}
	}
	return o
}

// Store is a durable key-value store: buckets of keys to values. It is safe
// for concurrent use.
type Store struct {
	db   *bolt.DB
	path string
	opts Options
	log  *slog.Logger

	// wake has room for one token; a leader leaves one to hand the
	// writing over to the writer goroutine (commit.go).
	wake chan struct{}
	// leaders counts the Commits writing on their own goroutine; Close
	// waits for them as for the writer.
	leaders sync.WaitGroup
	// quit is closed by Close; failed is closed when the store fails;
	// writerDone and ckptDone are closed by the writer and the
	// checkpointer on exit.
	quit       chan struct{}
	failed     chan struct{}
	writerDone chan struct{}
	ckptDone   chan struct{}
	// ckptWake has room for one token; the writer leaves one when the
	// pending records pass a quarter of the WAL.
	ckptWake chan struct{}

	// w is the writer's position in the WAL: set by Open, then touched
	// only by whoever is writing (see writing), and by Close after the
	// writing has stopped.
	w walState

	// scrubMu serializes Scrub calls; scrub is where the scrub stands,
	// guarded by scrubMu.
	scrubMu sync.Mutex
	scrub   scrubPos

	// ckptMu serializes every bbolt write transaction (checkpoints and
	// large batches), so a checkpoint's snapshot of pending is applied
	// before the next one is taken.
	ckptMu sync.Mutex

	mu sync.Mutex
	// queue holds the Commits the writer has not taken yet, oldest first.
	// INVARIANT: every request in queue has state queued; a request leaves
	// the queue exactly once, either taken by the writer (state taken) or
	// withdrawn by its own Commit on ctx (state withdrawn) or failed by
	// Close (state withdrawn); only requests in state taken are ever applied.
	queue []*request
	// writing is set while one goroutine, a leading Commit or the writer
	// goroutine, owns the WAL and the batches.
	// INVARIANT: at most one goroutine writes at a time; a Commit is only
	// queued while writing is set, and whoever writes takes the queue
	// before clearing it, so no queued Commit is left without a writer.
	writing bool
	closed  bool
	// failure is why the store failed for good (failure.go), nil while
	// it works.
	// INVARIANT: set once, never cleared; failed is closed when it is
	// set; no Commit is acknowledged after it is set.
	failure *failure
	stats   Stats
	// pending holds the acknowledged WAL records not yet applied to
	// bbolt, in seq order; pendingBytes is their size in the WAL.
	// INVARIANT: the writer appends, a checkpoint removes a prefix.
	pending      []*record
	pendingBytes int64
}

// Stats counts the writer's and the checkpointer's work since Open.
type Stats struct {
	// Txns is the number of batches made durable: WAL records written
	// and fdatasync'd, plus batches too large for the WAL applied in their
	// own bbolt transaction (DirectBatches).
	Txns uint64
	// FailedTxns is the number of batches that failed.
	FailedTxns uint64
	// Commits is the number of Commit calls acknowledged (returned nil)
	// by a batch.
	Commits uint64
	// Ops is the number of ops applied by those Commits.
	Ops uint64
	// MaxBatchCommits is the most Commit calls seen in one batch.
	MaxBatchCommits int
	// DirectBatches counts the batches too large for the WAL.
	DirectBatches uint64
	// Checkpoints and FailedCheckpoints count the bbolt transactions that
	// applied WAL records to the database.
	Checkpoints       uint64
	FailedCheckpoints uint64
	// WALWraps counts the times the writer went back to the start of the
	// WAL.
	WALWraps uint64
	// Recovered is the number of WAL records Open replayed into bbolt.
	Recovered uint64
	// Sealed is the number of values Open sealed in a file written
	// before change 69 (migrate.go); zero for a file sealed already.
	Sealed uint64
}

// Open opens the store at path, creating the file (mode 0600) if it is
// missing, opens or creates its WAL (path + ".wal", mode 0600), replays
// into the database every WAL record it does not have yet, and starts the
// writer and the checkpointer.
func Open(path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("store: open: empty path")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()

	_, statErr := os.Stat(path)
	created := errors.Is(statErr, fs.ErrNotExist)

	db, err := openBolt(path, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	if created {
		// bbolt fsyncs the new file but not the directory entry naming
		// it; without this a power loss could lose the whole file.
		if err := SyncDir(filepath.Dir(path)); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("store: open %s: sync directory: %w", path, err)
		}
	}

	s := &Store{
		db:         db,
		path:       path,
		opts:       opts,
		log:        opts.Logger.With("store", path),
		wake:       make(chan struct{}, 1),
		quit:       make(chan struct{}),
		failed:     make(chan struct{}),
		writerDone: make(chan struct{}),
		ckptDone:   make(chan struct{}),
		ckptWake:   make(chan struct{}, 1),
	}
	if err := s.openWAL(created); err != nil {
		_ = db.Close()
		return nil, err
	}
	go s.writer()
	go s.checkpointer()
	return s, nil
}

// openBolt opens the bbolt file, mapping its failures to ErrLocked and
// ErrCorrupt (with ErrFailed). bbolt may fault or panic on some damaged
// files rather than return an error; that is turned into ErrCorrupt too
// (the file descriptor and lock of the failed open may then stay held
// until the process exits).
func openBolt(path string, lockTimeout time.Duration) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, &failure{cause: fmt.Errorf("%w: open %s: %v", ErrCorrupt, path, r)}
		}
	}()
	// INVARIANT: NoSync and NoGrowSync stay false, so bbolt's Commit
	// returns only after fdatasync of the data pages and then of the meta
	// page; Commit's nil rests on this.
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      lockTimeout,
		FreelistType: bolt.FreelistMapType,
	})
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: open %s: no lock after %v", ErrLocked, path, lockTimeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch),
		// bbolt's mmap reports a file shorter than its two meta pages
		// only by this message.
		strings.Contains(err.Error(), "file size too small"):
		return nil, &failure{cause: fmt.Errorf("%w: open %s: %w", ErrCorrupt, path, err)}
	default:
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
}

// SyncDir fsyncs directory dir, so that a file created or renamed in it
// is durable (the store's files, and the server's CORRUPT mark).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// Get returns a copy of the value of key in bucket, or (nil, nil) if the
// bucket or the key does not exist. Like ForEach and Check, it first
// applies to the database every acknowledged Commit still waiting in the
// WAL, and fails if that checkpoint fails. A value that does not match its
// tag fails the store (ErrFailed, ErrCorrupt).
func (s *Store) Get(bucket string, key []byte) ([]byte, error) {
	if err := checkName(bucket, key); err != nil {
		return nil, err
	}
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		err := readGuarded(s.path, func() error {
			b := tx.Bucket([]byte(bucket))
			if b == nil {
				return nil
			}
			stored := b.Get(key)
			if stored == nil {
				return nil
			}
			v, ok := newSealer().open(sealPrefix(bucket), key, stored)
			if !ok {
				return badValue(s.path, bucket, key, stored)
			}
			out = append(make([]byte, 0, len(v)), v...)
			return nil
		})
		if err != nil {
			return s.fail(err, false)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ForEach calls fn for every key of bucket in key order, in one consistent
// snapshot, and stops at the first error fn returns, returning it. A missing
// bucket has no keys. k and v are valid only during the call; copy them to
// keep them. fn must not call Commit or Close: the snapshot can hold up the
// writer. Each value is checked against its tag before fn sees it; one
// that does not match fails the store (ErrFailed, ErrCorrupt), and fn is
// not called for it or any later key.
func (s *Store) ForEach(bucket string, fn func(k, v []byte) error) error {
	if err := checkBucket(bucket); err != nil {
		return err
	}
	return s.view(func(tx *bolt.Tx) error {
		sl, prefix := newSealer(), sealPrefix(bucket)
		var c *bolt.Cursor
		var k, stored []byte
		// Each step of bbolt's is guarded against a damaged page; fn is
		// called outside the guard, its panics are its own.
		step := func(move func() ([]byte, []byte)) error {
			err := readGuarded(s.path, func() error {
				if k, stored = move(); k == nil {
					return nil
				}
				if stored == nil {
					return &IntegrityError{File: s.path, Bucket: bucket, Key: bytes.Clone(k),
						Reason: "a nested bucket, which the store never writes"}
				}
				if _, ok := sl.open(prefix, k, stored); !ok {
					return badValue(s.path, bucket, k, stored)
				}
				return nil
			})
			if err != nil {
				return s.fail(err, false)
			}
			return nil
		}
		err := step(func() ([]byte, []byte) {
			b := tx.Bucket([]byte(bucket))
			if b == nil {
				return nil, nil
			}
			c = b.Cursor()
			return c.First()
		})
		for ; err == nil && k != nil; err = step(c.Next) {
			if err := fn(k, stored[:len(stored)-tagLen]); err != nil {
				return err
			}
		}
		return err
	})
}

// Check walks the whole file: bbolt's own consistency check, the tag of
// every value and the digest. It reports what it finds as ErrCorrupt, and
// fails the store. It is slow on a large file; a server runs it at
// start-up or in tests.
func (s *Store) Check() error {
	return s.view(func(tx *bolt.Tx) error {
		err := readGuarded(s.path, func() error {
			_, err := verifyFile(tx, s.path)
			return err
		})
		if err != nil {
			return s.fail(err, false)
		}
		return nil
	})
}

// view runs fn in a read transaction, after applying every acknowledged
// Commit to the database, mapping a closed database to ErrClosed. Errors
// returned by fn are passed through unchanged.
func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	s.mu.Lock()
	closed, failure := s.closed, s.failure
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if failure != nil {
		return failure
	}
	if err := s.flush(); err != nil {
		return err
	}
	tx, err := s.db.Begin(false)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	if err != nil {
		return fmt.Errorf("store: begin read: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return fn(tx)
}

// Stats returns the writer's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Close fails every queued Commit with ErrClosed, waits for the batch in
// flight, stops the writer and the checkpointer, applies every
// acknowledged Commit to the database and closes the files. If that last
// checkpoint fails, Close says so; the records stay in the WAL and the
// next Open replays them. A store that has failed writes nothing more:
// Close closes the files and returns Failed's error. Calls after the
// first return ErrClosed.
func (s *Store) Close() error { return s.close(true) }

// close is Close; without checkpoint it leaves the pending records in the
// WAL only, as a crash would (for tests).
func (s *Store) close(checkpoint bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	pending := s.queue
	s.queue = nil
	for _, r := range pending {
		r.state = withdrawn
	}
	s.mu.Unlock()

	for _, r := range pending {
		r.done <- ErrClosed
	}
	close(s.quit)
	<-s.writerDone
	s.leaders.Wait() // no Commit leads after closed is set
	<-s.ckptDone
	var errs []error
	if checkpoint && s.Failed() == nil {
		if err := s.checkpoint(); err != nil && !errors.Is(err, ErrFailed) {
			errs = append(errs, fmt.Errorf("checkpoint (the WAL keeps the records): %w", err))
		}
	}
	if err := s.Failed(); err != nil {
		errs = append(errs, err)
	}
	if err := s.w.f.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := s.db.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("store: close %s: %w", s.path, err)
	}
	return nil
}
