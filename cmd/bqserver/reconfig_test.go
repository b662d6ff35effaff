package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
)

// server replace, add and remove against a cluster none of whose servers
// runs: a change writes its proposal and the new member's material and
// says what to start, then exits 5 (no member endorsed it: push it when
// they are up, change 49); a second change waits for the first; server list
// shows the epoch in force and the one proposed; bad ids and an empty push
// are refused with what is wrong.
func TestServerChangesWithTheClusterDown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	code, _, errs := runInitForTest("--dir", dir, "--servers", "4", "--port-base", "47500")
	require.Equal(t, 0, code, errs)

	code, _, errs = runServerCmdForTest("server", "push", "--dir", dir, "--timeout", "200ms")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "holds no epoch after the cluster file")

	// Checked first: no member answers, so nothing is signed (issue 44).
	code, out, errs := runServerCmdForTest("server", "replace", "2", "--dir", dir, "--timeout", "300ms")
	require.Equal(t, 5, code, out+errs)
	require.Contains(t, errs, "only 0 of the 4 servers of epoch 0 answer, and 3 must endorse the change: nothing was signed")
	_, err := os.Stat(certs.ProposalPath(dir, 1))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(certs.ServerDir(dir, 4))
	require.ErrorIs(t, err, os.ErrNotExist, "no new member's material either")

	code, out, errs = runServerCmdForTest("server", "replace", "2", "--dir", dir, "--timeout", "300ms", "--dry-run")
	require.Equal(t, 5, code, out+errs)
	require.Contains(t, out, "epoch 1 would be proposed (dry run: nothing signed or written): members 0 1 3 4 (n=4 f=1 q=3")
	require.Contains(t, out, "4   127.0.0.1:47504  new")
	require.Contains(t, out, "2   127.0.0.1:47502  leaves")
	require.Contains(t, out, "down: server 3 (127.0.0.1:47503) unreachable")
	_, err = os.Stat(certs.ProposalPath(dir, 1))
	require.ErrorIs(t, err, os.ErrNotExist)

	code, out, errs = runServerCmdForTest("server", "remove", "1", "--dir", dir, "--timeout", "300ms", "--force")
	require.Equal(t, 1, code, out+errs)
	require.Contains(t, errs, "the change leaves n=3, which tolerates f=0 faulty servers where epoch 0 (n=4) tolerates 1: nothing was signed; pass --fewer-faults")
	code, out, errs = runServerCmdForTest("server", "add", "--dir", dir, "--port", "47501", "--timeout", "300ms", "--force")
	require.Equal(t, 1, code, out+errs)
	require.Contains(t, errs, "127.0.0.1:47501 is server 1's address")

	// --force proposes it all the same, for 'server push' to complete.
	code, out, errs = runServerCmdForTest("server", "replace", "2", "--dir", dir, "--timeout", "300ms", "--force")
	require.Equal(t, 5, code, out+errs)
	require.Contains(t, out, "epoch 1 proposed in "+certs.ProposalPath(dir, 1))
	require.Contains(t, out, "members 0 1 3 4 (n=4 f=1 q=3")
	require.Contains(t, out, "it counts once 3 servers of epoch 0 endorse it")
	require.Contains(t, out, "server 2 (127.0.0.1:47502) leaves")
	require.Contains(t, out, "server 4 is new, at 127.0.0.1:47504: once epoch 1 is endorsed")
	require.Contains(t, out, "bqserver run --dir "+dir+" --id 4")
	require.Contains(t, errs, "epoch 1 is proposed but endorsed by 0 of the 4 servers of epoch 0 (3 must")
	require.Contains(t, errs, "bqserver server push --dir "+dir)
	_, err = os.Stat(filepath.Join(certs.ServerDir(dir, 4), certs.SigningKeyFile))
	require.NoError(t, err)
	_, err = os.Stat(certs.EpochPath(dir, 1))
	require.ErrorIs(t, err, os.ErrNotExist, "no epoch file before q endorsements")

	code, out, errs = runServerCmdForTest("server", "add", "--dir", dir, "--port", "47600", "--timeout", "200ms", "--force")
	require.Equal(t, 1, code, out+errs)
	require.Contains(t, errs, "epoch 1 is proposed")
	require.Contains(t, errs, "one change at a time")

	code, out, errs = runServerCmdForTest("server", "push", "--dir", dir, "--timeout", "200ms")
	require.Equal(t, 5, code, out+errs)
	require.Contains(t, errs, "endorsed by 0 of the 4 servers of epoch 0")

	code, _, errs = runServerCmdForTest("server", "remove", "x", "--dir", dir)
	require.Equal(t, 2, code)
	require.Contains(t, errs, "ID must be a server id")

	code, out, errs = runServerCmdForTest("server", "list", "--dir", dir, "--timeout", "200ms")
	require.Equal(t, 5, code, errs)
	require.Contains(t, out, "epoch 0 (as made by bqserver init); n=4 f=1 q=3")
	require.Contains(t, out, "epoch 1 is proposed ("+certs.ProposalPath(dir, 1)+") and not yet endorsed by 3 servers of epoch 0")
	require.Contains(t, out, "127.0.0.1:47502")
}

// docs/protocol.md change 65, the commands: init --open names the operator
// key it writes; a change says so when the key is not in DIR/ca (nothing is
// signed or written); ca rotate-operator proposes the new key, which waits
// beside the old until the members endorse the epoch; a closed cluster has
// no operator key to rotate.
func TestOperatorKeyCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	code, out, errs := runInitForTest("--dir", dir, "--servers", "4", "--port-base", "47700", "--open")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, filepath.Join(dir, "ca", "operator.key"))
	require.Contains(t, out, "approves every change of the members; keep it apart from ca.key")

	key := filepath.Join(dir, certs.CADirName, certs.OperatorKeyFile)
	require.NoError(t, os.Rename(key, key+".offline"))
	code, out, errs = runServerCmdForTest("server", "replace", "2", "--dir", dir, "--timeout", "300ms", "--force")
	require.Equal(t, 1, code, out+errs)
	require.Contains(t, errs, key+" is missing")
	require.Contains(t, errs, "operator's approval")
	_, err := os.Stat(certs.ProposalPath(dir, 1))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing written")
	require.NoError(t, os.Rename(key+".offline", key))

	code, out, errs = runServerCmdForTest("ca", "rotate-operator", "--dir", dir, "--timeout", "300ms", "--force")
	require.Equal(t, 5, code, out+errs)
	require.Contains(t, out, "epoch 1 proposed in "+certs.ProposalPath(dir, 1))
	require.Contains(t, out, "a new operator key approves every change after epoch 1: it takes the old one's place in "+key)
	_, err = os.Stat(filepath.Join(dir, certs.CADirName, "operator-next.key"))
	require.NoError(t, err, "the new key waits beside the old")

	closed := filepath.Join(t.TempDir(), "closed")
	code, _, errs = runInitForTest("--dir", closed, "--servers", "4", "--port-base", "47800")
	require.Equal(t, 0, code, errs)
	code, out, errs = runServerCmdForTest("ca", "rotate-operator", "--dir", closed, "--timeout", "300ms", "--force")
	require.Equal(t, 1, code, out+errs)
	require.Contains(t, errs, "rotate-clients")
}
