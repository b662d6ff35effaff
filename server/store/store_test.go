package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenCreatesFileWithMode0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	s := openAt(t, path, Options{})
	for _, p := range []string{path, path + ".wal"} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), p)
	}
	fi, err := os.Stat(path + ".wal")
	require.NoError(t, err)
	require.EqualValues(t, DefaultWALSize, fi.Size())
	require.Equal(t, path, s.Path())
	require.NoError(t, s.Close())
}

func TestOpenRejectsBadOptions(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "x.db"), Options{MaxBatchOps: -1, MaxBatchBytes: -2, LockTimeout: -time.Second})
	require.Error(t, err)
	for _, field := range []string{"MaxBatchOps", "MaxBatchBytes", "LockTimeout"} {
		require.Contains(t, err.Error(), "store: Options."+field)
	}
	_, err = Open("", Options{})
	require.ErrorContains(t, err, "store: open: empty path")
}

func TestOpenLockedByAnotherOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	s := openAt(t, path, Options{})
	// flock conflicts between separate open files even in one process.
	_, err := Open(path, Options{LockTimeout: 100 * time.Millisecond, Logger: quiet})
	require.ErrorIs(t, err, ErrLocked)
	require.True(t, strings.HasPrefix(err.Error(), "store: "), err.Error())

	require.NoError(t, s.Close())
	s2 := openAt(t, path, Options{})
	require.NoError(t, s2.Close())
}

func TestOpenCorruptFile(t *testing.T) {
	for name, content := range map[string][]byte{
		"garbage":   bytes.Repeat([]byte("not a bbolt file "), 1024),
		"one page":  make([]byte, 4096),
		"truncated": []byte{1, 2, 3},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.db")
			require.NoError(t, os.WriteFile(path, content, 0o600))
			_, err := Open(path, Options{Logger: quiet})
			require.ErrorIs(t, err, ErrCorrupt)
			require.True(t, strings.HasPrefix(err.Error(), "store: "), err.Error())
		})
	}
	// A file whose meta pages are damaged is reported as corrupt.
	path := filepath.Join(t.TempDir(), "meta.db")
	s := openAt(t, path, Options{})
	require.NoError(t, s.Commit(context.Background(), put("b", "k", "v")))
	require.NoError(t, s.Close())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	pageSize := os.Getpagesize()
	for _, off := range []int{64, pageSize + 64} { // inside both meta pages
		raw[off] ^= 0xff
	}
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	_, err = Open(path, Options{Logger: quiet})
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestPutGetDeleteForEach(t *testing.T) {
	s := openTest(t, Options{})
	ctx := context.Background()

	v, err := s.Get("nobucket", []byte("k"))
	require.NoError(t, err)
	require.Nil(t, v)
	require.NoError(t, s.ForEach("nobucket", func(k, v []byte) error {
		t.Fatal("no keys expected")
		return nil
	}))

	require.NoError(t, s.Commit(ctx, put("b", "k2", "v2"), put("b", "k1", "v1"), put("b", "empty", "")))
	requireValue(t, s, "b", "k1", "v1")
	requireAbsent(t, s, "b", "nokey")

	// An empty value is present, not absent.
	got, err := s.Get("b", []byte("empty"))
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Empty(t, got)

	// Get returns a copy.
	got, err = s.Get("b", []byte("k1"))
	require.NoError(t, err)
	got[0] = 'X'
	requireValue(t, s, "b", "k1", "v1")

	// Later ops of one Commit win; deleting missing keys and buckets is fine.
	require.NoError(t, s.Commit(ctx, put("b", "k1", "a"), put("b", "k1", "b"), del("b", "k2"),
		del("b", "missing"), del("nobucket", "k")))
	requireValue(t, s, "b", "k1", "b")
	requireAbsent(t, s, "b", "k2")
	requireAbsent(t, s, "nobucket", "k")

	var keys []string
	require.NoError(t, s.ForEach("b", func(k, v []byte) error {
		keys = append(keys, string(k)+"="+string(v))
		return nil
	}))
	require.Equal(t, []string{"empty=", "k1=b"}, keys)

	stop := errors.New("stop")
	n := 0
	require.ErrorIs(t, s.ForEach("b", func(k, v []byte) error { n++; return stop }), stop)
	require.Equal(t, 1, n)

	// An empty Commit is a no-op.
	require.NoError(t, s.Commit(ctx))
}

func TestCommitValidation(t *testing.T) {
	s := openTest(t, Options{MaxBatchOps: 4, MaxBatchBytes: 64 << 20})
	ctx := context.Background()
	long := strings.Repeat("x", MaxBucketLen+1)
	cases := map[string][]Op{
		"empty bucket":     {put("", "k", "v")},
		"long bucket":      {put(long, "k", "v")},
		"empty key":        {put("b", "", "v")},
		"long key":         {{Bucket: "b", Key: make([]byte, MaxKeyLen+1)}},
		"big value":        {{Bucket: "b", Key: []byte("k"), Value: make([]byte, MaxValueLen+1)}},
		"delete and value": {{Bucket: "b", Key: []byte("k"), Value: []byte("v"), Delete: true}},
		"too many ops":     {put("b", "1", ""), put("b", "2", ""), put("b", "3", ""), put("b", "4", ""), put("b", "5", "")},
		"good then bad":    {put("b", "good", "v"), put("b", "", "v")},
	}
	for name, ops := range cases {
		err := s.Commit(ctx, ops...)
		require.ErrorIs(t, err, ErrInvalid, name)
		require.True(t, strings.HasPrefix(err.Error(), "store: "), err.Error())
	}
	requireAbsent(t, s, "b", "good")
	require.Zero(t, s.Stats().Txns, "invalid Commits must not reach the writer")

	_, err := s.Get("", []byte("k"))
	require.ErrorIs(t, err, ErrInvalid)
	_, err = s.Get("b", nil)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, s.ForEach("", func(k, v []byte) error { return nil }), ErrInvalid)

	small := openTest(t, Options{MaxBatchBytes: 10})
	require.ErrorIs(t, small.Commit(ctx, put("b", "k", "0123456789")), ErrInvalid)
	require.NoError(t, small.Commit(ctx, put("b", "k", "012345678")))
}

// A Commit's ops are applied together: readers see all or none of them, and
// a transaction that fails applies none.
func TestCommitIsAtomic(t *testing.T) {
	var fail fault
	hooks := &testHooks{beforeCommit: fail.get}
	s := openTest(t, Options{hooks: hooks})
	ctx := context.Background()

	// A failing transaction applies none of a multi-bucket Commit.
	fail.set(errNoSpace)
	err := s.Commit(ctx, put("a", "k", "1"), put("b", "k", "1"), put("c", "k", "1"))
	require.ErrorIs(t, err, syscall.ENOSPC)
	for _, b := range []string{"a", "b", "c"} {
		requireAbsent(t, s, b, "k")
	}
	fail.set(nil)

	// Readers never see half of a Commit: writers keep keys x and y of
	// bucket "pair" equal; every snapshot must show them equal.
	const writers, rounds = 4, 50
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				v := fmt.Sprintf("w%d-%d", w, i)
				if !assert.NoError(t, s.Commit(ctx, put("pair", "x", v), put("pair", "y", v))) {
					return
				}
			}
		})
	}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-done:
				return
			default:
			}
			seen := map[string]string{}
			err := s.ForEach("pair", func(k, v []byte) error {
				seen[string(k)] = string(v)
				return nil
			})
			if !assert.NoError(t, err) || !assert.Equal(t, seen["x"], seen["y"], "half a Commit visible") {
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	<-readerDone
}

// Many concurrent committers: every acknowledged Commit is applied and
// survives reopening, and the writer needed fewer transactions than Commits
// only if it grouped (checked deterministically in TestGroupCommit).
func TestConcurrentCommittersDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	s := openAt(t, path, Options{})
	const writers, per = 16, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range per {
				k := fmt.Sprintf("w%02d-%03d", w, i)
				if !assert.NoError(t, s.Commit(context.Background(), put("c", k, "v"+k), put("last", fmt.Sprint(w), k))) {
					return
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	require.EqualValues(t, writers*per, st.Commits)
	require.EqualValues(t, 2*writers*per, st.Ops)
	require.LessOrEqual(t, st.Txns, st.Commits)
	t.Logf("%d commits in %d transactions (largest batch %d commits)", st.Commits, st.Txns, st.MaxBatchCommits)
	require.NoError(t, s.Close())

	s = openAt(t, path, Options{})
	n := 0
	require.NoError(t, s.ForEach("c", func(k, v []byte) error {
		require.Equal(t, "v"+string(k), string(v))
		n++
		return nil
	}))
	require.Equal(t, writers*per, n)
	for w := range writers {
		requireValue(t, s, "last", fmt.Sprint(w), fmt.Sprintf("w%02d-%03d", w, per-1))
	}
	require.NoError(t, s.Check())
}

// While the writer is busy, Commits queue up, and the writer takes all of
// them into its next batch: one WAL record, one fdatasync.
func TestGroupCommit(t *testing.T) {
	g, hooks := newGate()
	var observed [][2]int
	var obsMu sync.Mutex
	path := filepath.Join(t.TempDir(), "g.db")
	s := openAt(t, path, Options{hooks: hooks, CheckpointInterval: time.Hour, Observe: func(d time.Duration, ops int) {
		obsMu.Lock()
		defer obsMu.Unlock()
		observed = append(observed, [2]int{ops, int(d)})
	}})
	ctx := context.Background()

	g.hold()
	first := commitAsync(ctx, s, put("g", "first", "1"))
	require.Equal(t, 1, <-g.entered)

	const n = 20
	results := make([]<-chan error, n)
	for i := range n {
		results[i] = commitAsync(ctx, s, put("g", fmt.Sprint(i), "v"), put("h", fmt.Sprint(i), "v"))
	}
	waitQueued(t, s, n)
	g.release <- struct{}{}

	require.NoError(t, recv(t, first))
	for i := range n {
		require.NoError(t, recv(t, results[i]))
	}
	st := s.Stats()
	require.EqualValues(t, 2, st.Txns, "one batch for the first Commit, one for the other %d", n)
	require.Equal(t, 2, len(readChain(t, path)), "one WAL record per batch")
	require.EqualValues(t, n+1, st.Commits)
	require.Equal(t, n, st.MaxBatchCommits)
	obsMu.Lock()
	require.Len(t, observed, 2)
	require.Equal(t, 1, observed[0][0])
	require.Equal(t, 2*n, observed[1][0])
	obsMu.Unlock()
	for i := range n {
		requireValue(t, s, "h", fmt.Sprint(i), "v")
	}
}

// A Commit that finds nobody writing writes its record on its own
// goroutine (no hand-off to the writer and back); one that queues behind it
// is written by the writer goroutine.
func TestLoneCommitWritesOnItsOwnGoroutine(t *testing.T) {
	var mu sync.Mutex
	var writers []string // the goroutine of each transaction
	g, hooks := newGate()
	gated := hooks.beforeTxn
	hooks.beforeTxn = func(n int) {
		mu.Lock()
		writers = append(writers, goroutineOf())
		mu.Unlock()
		gated(n)
	}
	s := openTest(t, Options{hooks: hooks})
	ctx := context.Background()

	require.NoError(t, s.Commit(ctx, put("g", "alone", "1")))
	mu.Lock()
	require.Equal(t, []string{goroutineOf()}, writers, "a lone Commit is written by its caller")
	writers = nil
	mu.Unlock()

	g.hold()
	ids := make(chan string, 1)
	first := make(chan error, 1)
	go func() { ids <- goroutineOf(); first <- s.Commit(ctx, put("g", "first", "1")) }()
	require.Equal(t, 1, <-g.entered)
	queued := commitAsync(ctx, s, put("g", "queued", "1"))
	waitQueued(t, s, 1)
	g.release <- struct{}{}
	require.NoError(t, recv(t, first))
	require.NoError(t, recv(t, queued))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, writers, 2)
	require.Equal(t, <-ids, writers[0], "the leading Commit writes its own")
	require.NotEqual(t, writers[0], writers[1], "what queued behind it is handed to the writer")
	requireValue(t, s, "g", "queued", "1")
}

// goroutineOf names the calling goroutine ("goroutine 42").
func goroutineOf() string {
	var buf [64]byte
	line := string(buf[:runtime.Stack(buf[:], false)])
	return line[:strings.Index(line, " [")]
}

// MaxBatchOps splits what is queued into several transactions, in order.
func TestGroupCommitRespectsMaxBatchOps(t *testing.T) {
	g, hooks := newGate()
	s := openTest(t, Options{hooks: hooks, MaxBatchOps: 10})
	ctx := context.Background()

	g.hold()
	first := commitAsync(ctx, s, put("g", "first", "1"))
	require.Equal(t, 1, <-g.entered)
	// Five Commits of 4 ops each on the same keys: batches of 2, 2 and 1
	// Commits; the last queued must win.
	var results []<-chan error
	for i := range 5 {
		v := fmt.Sprint(i)
		results = append(results, commitAsync(ctx, s, put("g", "a", v), put("g", "b", v), put("g", "c", v), put("g", "d", v)))
		waitQueued(t, s, i+1) // queue them in a known order
	}
	g.release <- struct{}{}
	require.NoError(t, recv(t, first))
	for _, r := range results {
		require.NoError(t, recv(t, r))
	}
	st := s.Stats()
	require.EqualValues(t, 4, st.Txns)
	require.Equal(t, 2, st.MaxBatchCommits)
	requireValue(t, s, "g", "d", "4")
}

// A transaction that fails for lack of space fails every Commit in it,
// applies none of them, and leaves the store usable.
func TestFailedTransactionFailsWholeBatch(t *testing.T) {
	g, hooks := newGate()
	var failNext sync.Mutex
	fail := false
	hooks.beforeCommit = func() error {
		failNext.Lock()
		defer failNext.Unlock()
		if fail {
			fail = false
			return errNoSpace
		}
		return nil
	}
	path := filepath.Join(t.TempDir(), "f.db")
	s := openAt(t, path, Options{hooks: hooks})
	ctx := context.Background()
	require.NoError(t, s.Commit(ctx, put("f", "acked", "1")))

	g.hold()
	first := commitAsync(ctx, s, put("f", "first", "1"))
	require.Equal(t, 1, <-g.entered)
	var batch []<-chan error
	for i := range 3 {
		batch = append(batch, commitAsync(ctx, s, put("f", fmt.Sprint(i), "v"), del("f", "acked")))
	}
	waitQueued(t, s, 3)
	g.hold() // stop again before the batch of three
	g.release <- struct{}{}
	require.NoError(t, recv(t, first))
	require.Equal(t, 3, <-g.entered)
	failNext.Lock()
	fail = true
	failNext.Unlock()
	g.release <- struct{}{}

	for _, r := range batch {
		err := recv(t, r)
		require.ErrorIs(t, err, syscall.ENOSPC)
		require.True(t, strings.HasPrefix(err.Error(), "store: "), err.Error())
		require.NotErrorIs(t, err, ErrUncertain)
	}
	st := s.Stats()
	require.EqualValues(t, 1, st.FailedTxns)
	require.EqualValues(t, 2, st.Txns) // "acked" and "first"
	require.EqualValues(t, 2, st.Commits)
	requireValue(t, s, "f", "acked", "1")
	requireValue(t, s, "f", "first", "1")
	for i := range 3 {
		requireAbsent(t, s, "f", fmt.Sprint(i))
	}

	// The store stays usable.
	require.NoError(t, s.Commit(ctx, put("f", "after", "1")))
	require.NoError(t, s.Close())
	s = openAt(t, path, Options{})
	requireValue(t, s, "f", "acked", "1")
	requireValue(t, s, "f", "after", "1")
	requireAbsent(t, s, "f", "0")
}

// The writer keeps working after a transaction that found no space, and
// later Commits succeed; nothing acknowledged before is lost.
func TestStoreUsableAfterNoSpace(t *testing.T) {
	var fail fault
	hooks := &testHooks{beforeCommit: fail.get}
	path := filepath.Join(t.TempDir(), "u.db")
	s := openAt(t, path, Options{hooks: hooks})
	ctx := context.Background()
	require.NoError(t, s.Commit(ctx, put("u", "before", "1")))

	fail.set(errNoSpace)
	for i := range 3 {
		require.ErrorIs(t, s.Commit(ctx, put("u", fmt.Sprint("during", i), "1")), syscall.ENOSPC)
	}
	fail.set(nil)
	require.NoError(t, s.Commit(ctx, put("u", "after", "1")))
	require.NoError(t, s.Close())

	s = openAt(t, path, Options{})
	requireValue(t, s, "u", "before", "1")
	requireValue(t, s, "u", "after", "1")
	for i := range 3 {
		requireAbsent(t, s, "u", fmt.Sprint("during", i))
	}
	require.NoError(t, s.Check())
}

func TestCommitContext(t *testing.T) {
	ctx := context.Background()

	t.Run("done before the call", func(t *testing.T) {
		s := openTest(t, Options{})
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		require.ErrorIs(t, s.Commit(cctx, put("x", "k", "v")), context.Canceled)
		requireAbsent(t, s, "x", "k")
		require.Zero(t, s.Stats().Txns)
	})

	t.Run("cancelled while queued", func(t *testing.T) {
		g, hooks := newGate()
		s := openTest(t, Options{hooks: hooks})
		g.hold()
		first := commitAsync(ctx, s, put("x", "first", "v"))
		<-g.entered

		cctx, cancel := context.WithCancel(ctx)
		cancelled := commitAsync(cctx, s, put("x", "cancelled", "v"))
		waitQueued(t, s, 1)
		other := commitAsync(ctx, s, put("x", "other", "v"))
		waitQueued(t, s, 2)
		cancel()
		require.ErrorIs(t, recv(t, cancelled), context.Canceled)
		waitQueued(t, s, 1) // withdrawn from the queue

		g.release <- struct{}{}
		require.NoError(t, recv(t, first))
		require.NoError(t, recv(t, other))
		requireAbsent(t, s, "x", "cancelled")
		requireValue(t, s, "x", "other", "v")
	})

	t.Run("deadline while queued", func(t *testing.T) {
		g, hooks := newGate()
		s := openTest(t, Options{hooks: hooks})
		g.hold()
		first := commitAsync(ctx, s, put("x", "first", "v"))
		<-g.entered
		dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, s.Commit(dctx, put("x", "late", "v")), context.DeadlineExceeded)
		g.release <- struct{}{}
		require.NoError(t, recv(t, first))
		require.NoError(t, s.Commit(ctx, put("x", "sync", "v"))) // after any stray batch
		requireAbsent(t, s, "x", "late")
	})

	t.Run("cancelled after being taken", func(t *testing.T) {
		g, hooks := newGate()
		s := openTest(t, Options{hooks: hooks})
		cctx, cancel := context.WithCancel(ctx)
		g.hold()
		taken := commitAsync(cctx, s, put("x", "taken", "v"))
		<-g.entered
		cancel()
		select {
		case err := <-taken:
			t.Fatalf("Commit returned %v before its transaction finished", err)
		case <-time.After(20 * time.Millisecond):
		}
		g.release <- struct{}{}
		require.NoError(t, recv(t, taken))
		requireValue(t, s, "x", "taken", "v")
	})
}

func TestCloseFailsPendingAndWaitsForWriter(t *testing.T) {
	g, hooks := newGate()
	path := filepath.Join(t.TempDir(), "close.db")
	s := openAt(t, path, Options{hooks: hooks})
	ctx := context.Background()

	g.hold()
	inFlight := commitAsync(ctx, s, put("c", "inflight", "v"))
	<-g.entered
	p1 := commitAsync(ctx, s, put("c", "p1", "v"))
	p2 := commitAsync(ctx, s, put("c", "p2", "v"))
	waitQueued(t, s, 2)

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	require.ErrorIs(t, recv(t, p1), ErrClosed)
	require.ErrorIs(t, recv(t, p2), ErrClosed)
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a transaction was in flight", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.release <- struct{}{}
	require.NoError(t, recv(t, inFlight))
	require.NoError(t, recv(t, closed))

	// Everything after Close fails with ErrClosed.
	require.ErrorIs(t, s.Commit(ctx, put("c", "late", "v")), ErrClosed)
	_, err := s.Get("c", []byte("inflight"))
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.ForEach("c", func(k, v []byte) error { return nil }), ErrClosed)
	require.ErrorIs(t, s.Close(), ErrClosed)

	s = openAt(t, path, Options{})
	requireValue(t, s, "c", "inflight", "v")
	requireAbsent(t, s, "c", "p1")
	requireAbsent(t, s, "c", "p2")
}

func TestReopenSeesEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	ctx := context.Background()
	want := map[string]string{}
	for round := range 5 {
		s := openAt(t, path, Options{})
		for k, v := range want {
			requireValue(t, s, "r", k, v)
		}
		var ops []Op
		for i := range 100 {
			k := fmt.Sprintf("%d-%d", round, i)
			v := strings.Repeat(k, i+1)
			ops = append(ops, put("r", k, v))
			want[k] = v
		}
		if round > 0 {
			k := fmt.Sprintf("%d-%d", round-1, 7)
			ops = append(ops, del("r", k))
			delete(want, k)
		}
		require.NoError(t, s.Commit(ctx, ops...))
		require.NoError(t, s.Close())
	}
	s := openAt(t, path, Options{})
	n := 0
	require.NoError(t, s.ForEach("r", func(k, v []byte) error {
		require.Equal(t, want[string(k)], string(v))
		n++
		return nil
	}))
	require.Equal(t, len(want), n)
	require.NoError(t, s.Check())
}
