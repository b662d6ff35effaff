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

	"github.com/stretchr/testify/require"
)

// A full disk fails the Commit with the error, loses nothing acknowledged,
// applies nothing of the failed Commit, and the store works again once
// space is freed. The disk is a small tmpfs, so the test runs only where it
// may mount one (root with CAP_SYS_ADMIN); elsewhere the injected-fault
// tests (TestFailedTransactionFailsWholeBatch) cover the same paths.
func TestDiskFullTmpfs(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o700))
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs (%v); needs root", err)
	}
	// Runs before t.TempDir's removal (cleanups run last-in first-out).
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(mnt, 0)) })

	path := filepath.Join(mnt, "full.db")
	s, err := Open(path, Options{Logger: quiet})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	ctx := context.Background()

	value := func(k string, n int) []byte { return []byte(strings.Repeat(k+";", n/(len(k)+1)+1)[:n]) }
	acked := map[string]int{} // key → value size
	for i := range 8 {
		k := fmt.Sprint("before-", i)
		require.NoError(t, s.Commit(ctx, put("d", k, string(value(k, 32<<10)))))
		acked[k] = 32 << 10
	}

	// Fill the rest of the file system.
	filler := filepath.Join(mnt, "filler")
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

	// Grow the database until a Commit fails for lack of space.
	var failed []string
	var commitErr error
	for i := 0; i < 64 && commitErr == nil; i++ {
		k := fmt.Sprint("during-", i)
		commitErr = s.Commit(ctx, put("d", k, string(value(k, 256<<10))), put("e", k, "small"))
		if commitErr == nil {
			acked[k] = 256 << 10
		} else {
			failed = append(failed, k)
		}
	}
	require.Error(t, commitErr, "the file system never filled up")
	t.Logf("full disk: %v", commitErr)
	require.True(t, strings.HasPrefix(commitErr.Error(), "store: "), commitErr.Error())
	require.True(t, errors.Is(commitErr, syscall.ENOSPC) || strings.Contains(commitErr.Error(), "no space left"), commitErr.Error())
	require.NotErrorIs(t, commitErr, ErrUncertain)
	require.EqualValues(t, 1, s.Stats().FailedTxns)

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
	check(s)
	require.NoError(t, s.Check())

	// Still full: another large Commit fails the same way.
	require.Error(t, s.Commit(ctx, put("d", "still-full", string(value("still-full", 256<<10)))))
	failed = append(failed, "still-full")

	// Free the space: the same store accepts writes again.
	require.NoError(t, os.Remove(filler))
	for i := range 4 {
		k := fmt.Sprint("after-", i)
		require.NoError(t, s.Commit(ctx, put("d", k, string(value(k, 256<<10)))))
		acked[k] = 256 << 10
	}
	check(s)
	require.NoError(t, s.Close())

	s, err = Open(path, Options{Logger: quiet})
	require.NoError(t, err)
	check(s)
	require.NoError(t, s.Check())
}
