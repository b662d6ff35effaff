package certs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TryLockFile tells "another holds it" (false, no error) from a failure,
// two opens of one file exclude each other even within one process, and
// the lock leaves the contents readable through other handles on every
// platform (Windows byte-range locks are mandatory).
func TestTryLockFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	require.NoError(t, os.WriteFile(path, []byte("contents\n"), 0o600))
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_RDWR, 0o600)
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	a, b := open(), open()

	locked, err := TryLockFile(a)
	require.NoError(t, err)
	require.True(t, locked)
	locked, err = TryLockFile(b)
	require.NoError(t, err, "would block is not an error")
	require.False(t, locked)

	data, err := os.ReadFile(path)
	require.NoError(t, err, "the contents stay readable while locked")
	require.Equal(t, "contents\n", string(data))
	_, err = a.WriteAt([]byte("C"), 0)
	require.NoError(t, err, "the holder writes")

	require.NoError(t, UnlockFile(a))
	locked, err = TryLockFile(b)
	require.NoError(t, err)
	require.True(t, locked, "free once unlocked")
	require.NoError(t, b.Close())
	locked, err = TryLockFile(a)
	require.NoError(t, err)
	require.True(t, locked, "free once the holder's file is closed")
}
