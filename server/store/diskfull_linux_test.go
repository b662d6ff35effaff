//go:build linux

package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bq-lock/bq/internal/testutil"
	"github.com/stretchr/testify/require"
)

// A full disk fails Commits with a clear error once the WAL has no room
// left, loses nothing acknowledged, applies nothing of the failed Commits,
// and the store works again once space is freed. The WAL is allocated in
// full when it is created, so writing records never needs space; what fails
// is the checkpoint that grows the bbolt file. Commits go on succeeding
// while the WAL has room, then the writer needs a checkpoint to wrap around
// and fails. The disk is a small tmpfs, so the test runs only where it may
// mount one (root with CAP_SYS_ADMIN); elsewhere the injected-fault tests
// (TestCheckpointFailure, TestFailedTransactionFailsWholeBatch) cover the
// same paths.
func TestDiskFullTmpfs(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o700))
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		testutil.SkipUnprivileged(t, "cannot mount a tmpfs (%v); needs root", err)
	}
	// Runs before t.TempDir's removal (cleanups run last-in first-out).
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(mnt, 0)) })

	const walSize = 1 << 20 // records of 64 KiB: about 15 per pass
	opts := Options{Logger: quiet, WALSize: walSize}
	path := filepath.Join(mnt, "full.db")
	s, err := Open(path, opts)
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	ctx := context.Background()

	value := func(k string, n int) []byte { return []byte(strings.Repeat(k+";", n/(len(k)+1)+1)[:n]) }
	acked := map[string]int{} // key → value size
	var failed []string
	for i := range 8 {
		k := fmt.Sprint("before-", i)
		require.NoError(t, s.Commit(ctx, put("d", k, string(value(k, 32<<10)))))
		acked[k] = 32 << 10
	}

	filler := filepath.Join(mnt, "filler")
	fill := func() {
		f, err := os.Create(filler)
		require.NoError(t, err)
		chunk := make([]byte, 64<<10)
		for {
			if _, err := f.Write(chunk); err != nil {
				require.ErrorIs(t, err, syscall.ENOSPC)
				break
			}
		}
		require.NoError(t, f.Close())
	}
	// growUntilFull commits 64 KiB values until a Commit fails; at most
	// 4 MiB, so the file system must fill up first.
	growUntilFull := func(prefix string) error {
		t.Helper()
		var commitErr error
		for i := 0; i < 64 && commitErr == nil; i++ {
			k := fmt.Sprint(prefix, i)
			commitErr = s.Commit(ctx, put("d", k, string(value(k, 64<<10))), put("e", k, "small"))
			if commitErr == nil {
				acked[k] = 64 << 10
			} else {
				failed = append(failed, k)
			}
		}
		require.Error(t, commitErr, "the file system never filled up")
		t.Logf("full disk: %v", commitErr)
		require.True(t, strings.HasPrefix(commitErr.Error(), "store: "), commitErr.Error())
		require.True(t, errors.Is(commitErr, syscall.ENOSPC) || strings.Contains(commitErr.Error(), "no space left"), commitErr.Error())
		require.Contains(t, commitErr.Error(), "checkpoint")
		require.NotErrorIs(t, commitErr, ErrUncertain)
		return commitErr
	}
	check := func(s *Store) {
		t.Helper()
		for k, n := range acked {
			got, err := s.Get("d", []byte(k))
			require.NoError(t, err)
			require.Equal(t, value(k, n), got, "acked %s", k)
		}
		for _, k := range failed {
			requireAbsent(t, s, "d", k)
			requireAbsent(t, s, "e", k)
		}
	}

	// Fill the file system, then write until the WAL is full.
	fill()
	growUntilFull("during-")
	st := s.Stats()
	require.EqualValues(t, 1, st.FailedTxns)
	require.NotZero(t, st.FailedCheckpoints)
	require.NotZero(t, st.Commits-8, "Commits must succeed while the WAL has room")

	// Still full: another Commit fails the same way.
	require.Error(t, s.Commit(ctx, put("d", "still-full", string(value("still-full", 64<<10)))))
	failed = append(failed, "still-full")
	// Reads need the acknowledged records in bbolt: they fail too.
	_, err = s.Get("d", []byte("before-0"))
	require.ErrorContains(t, err, "store: checkpoint")

	// Free the space: the same store accepts writes again and has lost
	// nothing.
	require.NoError(t, os.Remove(filler))
	for i := range 4 {
		k := fmt.Sprint("after-", i)
		require.NoError(t, s.Commit(ctx, put("d", k, string(value(k, 64<<10)))))
		acked[k] = 64 << 10
	}
	check(s)
	require.NoError(t, s.Check())

	// Full again, and closed while full: Close cannot checkpoint and says
	// so; the acknowledged records wait in the WAL for the next Open.
	fill()
	growUntilFull("again-")
	require.ErrorContains(t, s.Close(), "checkpoint")
	require.NoError(t, os.Remove(filler))

	s, err = Open(path, opts)
	require.NoError(t, err)
	require.NotZero(t, s.Stats().Recovered)
	check(s)
	require.NoError(t, s.Check())
	require.NoError(t, s.Close())
}
