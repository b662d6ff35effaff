package agent

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The socket is made 0600 (or the mode given), a socket file an agent that
// died left is replaced, one an agent serves is not, a file that is no
// socket is not touched, and a path too long for a socket is refused with
// a sentence that says so.
func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.sock")
	l, err := ListenUnix(path, 0o600, "")
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	_, err = ListenUnix(path, 0o600, "")
	require.ErrorContains(t, err, "another agent serves")

	// A socket left behind: the listener's file stays when it is not
	// unlinked on close.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, l.Close())
	l, err = ListenUnix(path, 0o660, "")
	require.NoError(t, err, "a dead agent's socket is replaced")
	fi, err = os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o660), fi.Mode().Perm())
	require.NoError(t, l.Close())

	plain := filepath.Join(dir, "plain")
	require.NoError(t, os.WriteFile(plain, []byte("x"), 0o600))
	_, err = ListenUnix(plain, 0o600, "")
	require.ErrorContains(t, err, "not a socket")

	_, err = ListenUnix(filepath.Join(dir, strings.Repeat("s", 120)+".sock"), 0o600, "")
	require.ErrorContains(t, err, "give a shorter --socket")
}
