package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Fail-stop (docs/protocol.md change 69, rule 5): a failed fdatasync or
// an I/O error fails the store for good; a full disk does not.

// requireFailedForGood checks that s has failed: Failed says so, and every
// operation returns ErrFailed (never ErrUncertain: nothing is written any
// more), the checkpointer has stopped, and nothing is acknowledged.
func requireFailedForGood(t testing.TB, s *Store, cause error) {
	t.Helper()
	failed := s.Failed()
	require.Error(t, failed)
	require.ErrorIs(t, failed, ErrFailed)
	require.ErrorIs(t, failed, cause)
	select {
	case <-s.FailedChan():
	default:
		t.Fatal("FailedChan is not closed")
	}
	txns := s.Stats().Txns
	for i := range 3 {
		err := s.Commit(context.Background(), put("f", fmt.Sprint("later-", i), "v"))
		require.ErrorIs(t, err, ErrFailed)
		require.NotErrorIs(t, err, ErrUncertain)
		require.True(t, strings.HasPrefix(err.Error(), "store: failed: "), err.Error())
	}
	require.Equal(t, txns, s.Stats().Txns, "a failed store made a batch durable")
	_, err := s.Get("f", []byte("k"))
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, s.ForEach("f", func(k, v []byte) error { return nil }), ErrFailed)
	require.ErrorIs(t, s.Check(), ErrFailed)
	_, err = s.Scrub(100)
	require.ErrorIs(t, err, ErrFailed)
	select {
	case <-s.ckptDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the checkpointer still runs on a failed store")
	}
}

// A failed fdatasync of the WAL: the Commit fails, uncertain (its record
// was written and may survive), every Commit queued behind it and every
// later one fails, certain, and the store is never synced again. After a
// restart, what was acknowledged is there; the uncertain Commit is there
// whole or not at all.
func TestSyncFailureFailsStore(t *testing.T) {
	g, hooks := newGate()
	var fail fault
	var syncs atomic.Int32
	hooks.beforeSync = func() error {
		syncs.Add(1)
		return fail.get()
	}
	path := filepath.Join(t.TempDir(), "s.db")
	opts := Options{CheckpointInterval: noTimer, hooks: hooks}
	s := openAt(t, path, opts)
	ctx := context.Background()
	require.NoError(t, s.Commit(ctx, put("f", "acked", "1")))

	fail.set(syscall.EIO)
	g.hold()
	inFlight := commitAsync(ctx, s, put("f", "x", "uncertain"), put("f", "y", "uncertain"))
	require.Equal(t, 1, <-g.entered)
	queued := commitAsync(ctx, s, put("f", "queued", "1"))
	waitQueued(t, s, 1)
	g.release <- struct{}{}

	err := recv(t, inFlight)
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, err, ErrUncertain)
	require.ErrorIs(t, err, syscall.EIO)
	require.NotErrorIs(t, err, ErrCorrupt)
	require.True(t, strings.HasPrefix(err.Error(), "store: failed (commit outcome uncertain): sync WAL"), err.Error())
	err = recv(t, queued)
	require.ErrorIs(t, err, ErrFailed)
	require.NotErrorIs(t, err, ErrUncertain)

	fail.set(nil) // the disk "works" again: a retried fdatasync would now succeed
	n := syncs.Load()
	requireFailedForGood(t, s, syscall.EIO)
	require.Equal(t, n, syncs.Load(), "an fdatasync after a failed one")
	require.NotErrorIs(t, s.Failed(), ErrUncertain)
	require.ErrorIs(t, s.Close(), ErrFailed)

	s = openAt(t, path, opts)
	requireValue(t, s, "f", "acked", "1")
	x, err := s.Get("f", []byte("x"))
	require.NoError(t, err)
	y, err := s.Get("f", []byte("y"))
	require.NoError(t, err)
	require.Equal(t, x, y, "half of the uncertain Commit")
	requireAbsent(t, s, "f", "queued")
	for i := range 3 {
		requireAbsent(t, s, "f", fmt.Sprint("later-", i))
	}
}

// An I/O error on a write (not a full disk) fails the store: of a WAL
// record, of a checkpoint's bbolt transaction, of a large batch's. So does
// a failed fdatasync of bbolt, even one that says ENOSPC (bbolt returns it
// as a bare errno): it is never retried. A WAL record whose write failed
// is never overwritten by a failed store: its outcome is uncertain (Open
// replays it if its bytes landed whole).
func TestIOErrorFailsStore(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		hooks     func(f *fault) *testHooks
		err       error
		ops       []Op
		uncertain bool
	}{
		"WAL write": {
			hooks:     func(f *fault) *testHooks { return &testHooks{beforeCommit: f.get} },
			err:       errIO,
			ops:       []Op{put("f", "k", "v"), put("f", "k2", "v")},
			uncertain: true,
		},
		"WAL write after its bytes landed": {
			hooks:     func(f *fault) *testHooks { return &testHooks{afterWrite: f.get} },
			err:       errIO,
			ops:       []Op{put("f", "k", "v"), put("f", "k2", "v")},
			uncertain: true,
		},
		"checkpoint write": {
			hooks: func(f *fault) *testHooks { return &testHooks{beforeCheckpoint: f.get} },
			err:   errIO,
		},
		"checkpoint fdatasync, ENOSPC": {
			hooks: func(f *fault) *testHooks { return &testHooks{beforeCheckpoint: f.get} },
			err:   syscall.ENOSPC,
		},
		"large batch": {
			hooks: func(f *fault) *testHooks { return &testHooks{beforeCommit: f.get} },
			err:   errIO,
			ops:   []Op{put("f", "big", strings.Repeat("B", MinWALSize/2))},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var fail fault
			path := filepath.Join(t.TempDir(), "io.db")
			opts := Options{WALSize: MinWALSize, CheckpointInterval: noTimer, hooks: tc.hooks(&fail)}
			s := openAt(t, path, opts)
			require.NoError(t, s.Commit(ctx, put("f", "acked", "1")))
			fail.set(tc.err)
			var err error
			if tc.ops != nil {
				err = s.Commit(ctx, tc.ops...)
			} else {
				_, err = s.Get("f", []byte("acked")) // a checkpoint
			}
			require.ErrorIs(t, err, ErrFailed)
			require.ErrorIs(t, err, tc.err)
			require.Equal(t, tc.uncertain, errors.Is(err, ErrUncertain), "%v", err)
			fail.set(nil)
			requireFailedForGood(t, s, tc.err)
			require.ErrorIs(t, s.Close(), ErrFailed)

			s = openAt(t, path, Options{})
			requireValue(t, s, "f", "acked", "1")
			if tc.uncertain { // all or nothing
				k, err := s.Get("f", []byte("k"))
				require.NoError(t, err)
				k2, err := s.Get("f", []byte("k2"))
				require.NoError(t, err)
				require.Equal(t, k, k2)
				return
			}
			for _, op := range tc.ops {
				requireAbsent(t, s, op.Bucket, string(op.Key))
			}
		})
	}
}

// The checkpointer finds the failure on its own: Commits queued behind it
// fail, and it stops.
func TestCheckpointerFailureStopsStore(t *testing.T) {
	var fail fault
	s := openTest(t, Options{CheckpointInterval: time.Millisecond, hooks: &testHooks{beforeCheckpoint: fail.get}})
	ctx := context.Background()
	fail.set(syscall.EIO)
	require.NoError(t, s.Commit(ctx, put("f", "k", "v")), "acknowledged from the WAL")
	require.Eventually(t, func() bool { return s.Failed() != nil }, 10*time.Second, time.Millisecond)
	fail.set(nil)
	requireFailedForGood(t, s, syscall.EIO)
}

// Many committers when the fdatasync fails: none is acknowledged after the
// failure, every one fails with ErrFailed.
func TestNoAckAfterFailure(t *testing.T) {
	var failed atomic.Bool
	var fail fault
	hooks := &testHooks{beforeSync: func() error {
		if err := fail.get(); err != nil {
			failed.Store(true)
			return err
		}
		return nil
	}}
	s := openTest(t, Options{hooks: hooks})
	ctx := context.Background()
	var wg sync.WaitGroup
	var ackedAfter atomic.Int32
	start := make(chan struct{})
	for w := range 8 {
		wg.Go(func() {
			<-start
			for i := 0; ; i++ {
				wasFailed := failed.Load()
				err := s.Commit(ctx, put("f", fmt.Sprint(w, "-", i), "v"))
				if err == nil && wasFailed {
					ackedAfter.Add(1)
				}
				if err != nil {
					if !errors.Is(err, ErrFailed) {
						t.Errorf("Commit: %v, want ErrFailed", err)
					}
					return
				}
			}
		})
	}
	close(start)
	time.Sleep(20 * time.Millisecond)
	fail.set(syscall.EIO)
	wg.Wait()
	require.Zero(t, ackedAfter.Load(), "Commits acknowledged after the fdatasync failed")
	require.ErrorIs(t, s.Failed(), syscall.EIO)
}

// isNoSpace takes only a write that found no space: not an fdatasync, not
// another error.
func TestIsNoSpace(t *testing.T) {
	for err, want := range map[error]bool{
		errNoSpace: true,
		&os.PathError{Op: "write", Path: "x", Err: syscall.EDQUOT}: true,
		fmt.Errorf("commit: %w", errNoSpace):                       true,
		errors.New("file resize error: no space left on device"):   true,
		errIO:          false,
		syscall.ENOSPC: false, // bbolt's fdatasync
		&os.PathError{Op: "fdatasync", Path: "x", Err: syscall.ENOSPC}:       false, // ours
		&os.PathError{Op: "read", Path: "x", Err: syscall.ENOSPC}:            false,
		errors.New("file sync error: no space left on device"):               false, // bbolt's grow
		errors.New("injected: no space left on device"):                      false,
		fmt.Errorf("%w: sync WAL: %w", ErrUncertain, syscall.ENOSPC):         false,
		&os.PathError{Op: "write", Path: "x", Err: errors.New("no space")}:   false,
		&os.PathError{Op: "write", Path: "x", Err: syscall.EROFS}:            false,
		fmt.Errorf("x: %w", &os.PathError{Op: "write", Err: syscall.EDQUOT}): true,
	} {
		require.Equal(t, want, isNoSpace(err), "%v", err)
	}
}

// The first record of a pass waits for its marker's fdatasync: if that
// fails, the store fails and the record was never written (certain).
func TestMarkerSyncFailureFailsStore(t *testing.T) {
	var fail fault
	path := filepath.Join(t.TempDir(), "m.db")
	opts := Options{hooks: &testHooks{beforeSync: fail.get}}
	s := openAt(t, path, opts)
	fail.set(syscall.EIO)
	err := s.Commit(context.Background(), put("f", "k", "v"))
	require.ErrorIs(t, err, ErrFailed)
	require.NotErrorIs(t, err, ErrUncertain)
	require.ErrorContains(t, err, "marker")
	fail.set(nil)
	requireFailedForGood(t, s, syscall.EIO)
	require.ErrorIs(t, s.Close(), ErrFailed)
	s = openAt(t, path, Options{})
	requireAbsent(t, s, "f", "k")
}
