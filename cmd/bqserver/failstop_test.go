package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/server"
)

// A server whose directory holds the CORRUPT mark (docs/protocol.md change
// 69) does not start: 'run' exits 9 and says to replace it; 'server list'
// shows the member "corrupt" with the mark's first line and the command
// that repairs it. Only the marked member: the others stay "unreachable".
func TestACorruptMarkStopsRunAndShowsInServerList(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	code, _, errs := runInitForTest("--dir", dir, "--servers", "4", "--port-base", "47420")
	require.Equal(t, 0, code, errs)
	mark := filepath.Join(certs.ServerDir(dir, 1), server.CorruptFileName)
	require.NoError(t, os.WriteFile(mark, []byte("store: bq.db is corrupt: bucket \"meta\" key 01: the value does not match its tag\nfound at ...\n"), 0o600))

	code, _, errs = runServerCmdForTest("run", "--dir", dir, "--id", "1")
	require.Equal(t, exitStoreFailed, code, errs)
	require.Contains(t, errs, "refusing to start")
	require.Contains(t, errs, "server replace")

	code, out, _ := runServerCmdForTest("server", "list", "--dir", dir, "--timeout", "300ms")
	require.Equal(t, 5, code, out)
	require.Regexp(t, regexp.MustCompile(`(?m)^1 +member +\S+ +corrupt `), out)
	require.Contains(t, out, `bucket "meta" key 01: the value does not match its tag`)
	require.Contains(t, out, "'bqserver server replace 1 --dir DIR'")
	for _, id := range []string{"0", "2", "3"} {
		require.Regexp(t, regexp.MustCompile(`(?m)^`+id+` +member +\S+ +unreachable `), out)
	}
}
