package certs

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// docs/protocol.md change 65: an open cluster's init writes an operator
// key of its own, 0600, beside the CA's (never the CA's key), and names its
// public half in the cluster file as approver, which loads back; a closed
// cluster gets none (its client CA approves).
func TestInitOpenWritesTheOperatorKey(t *testing.T) {
	dir, c := newCluster(t)
	require.False(t, c.Closed())
	path := filepath.Join(dir, CADirName, OperatorKeyFile)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	k, err := parseSigningKey(data)
	require.NoError(t, err)
	require.NotNil(t, c.Approver)
	require.Equal(t, c.Approver.ID, k.Public.ID, "the cluster's approver is the key written")
	require.NotEqual(t, c.CAKey().ID, k.Public.ID, "a key apart from the cluster CA's")
	text, err := os.ReadFile(clusterPath(dir))
	require.NoError(t, err)
	require.Contains(t, string(text), "\napprover: "+c.Approver.Wire.String()+"\n")
	loaded, err := LoadCluster(clusterPath(dir))
	require.NoError(t, err)
	require.Equal(t, c.Approver.ID, loaded.Approver.ID)
	got, err := LoadOperatorKey(dir)
	require.NoError(t, err)
	require.Equal(t, k.Public.ID, got.Public.ID)

	closedDir, closed := newClusterWith(t, InitOptions{Servers: 4, F: 1, Closed: true})
	require.Nil(t, closed.Approver)
	_, err = os.Stat(filepath.Join(closedDir, CADirName, OperatorKeyFile))
	require.ErrorIs(t, err, os.ErrNotExist)
	text, err = os.ReadFile(clusterPath(closedDir))
	require.NoError(t, err)
	require.NotContains(t, string(text), "approver:")
	_, err = LoadOperatorKey(closedDir)
	require.ErrorContains(t, err, "closed")
}

// The operator's side of change 65: on an open cluster a change's proposal
// carries the approval of the operator key in force, bound to it; the
// epoch names the approver, so the next change knows who approves it.
// Without the key file the change is refused, saying which file and why;
// a cluster file made before change 65 (no approver) proposes without an
// approval, as before.
func TestAnOpenClustersChangeIsApprovedWithTheOperatorKey(t *testing.T) {
	dir, c := newCluster(t)
	now := time.Now()
	p, err := PlanChange(dir, Change{Remove: sid(2), Add: true}, now, rand.Reader)
	require.NoError(t, err)
	require.NoError(t, wire.VerifyApproval([]*crypto.Parsed{c.Approver}, c.ID(), 1, p.Proposal.Proposal, p.Proposal.Approval),
		"approved by the operator key, for this epoch")
	require.Error(t, wire.VerifyApproval([]*crypto.Parsed{c.CAKey()}, c.ID(), 1, p.Proposal.Proposal, p.Proposal.Approval))
	require.Equal(t, []crypto.PublicKey{c.Approver.Wire}, p.Next.Approvers, "the epoch names the approver in force")

	key := filepath.Join(dir, CADirName, OperatorKeyFile)
	require.NoError(t, os.Rename(key, key+".offline"))
	_, err = PlanChange(dir, Change{Remove: sid(2), Add: true}, now, rand.Reader)
	require.ErrorContains(t, err, key+" is missing")
	require.ErrorContains(t, err, "operator's approval")
	require.NoError(t, os.Rename(key+".offline", key))

	// A cluster file without approver: change 49's rule, no approval.
	old := filepath.Join(t.TempDir(), "old")
	_, err = Init(InitOptions{Dir: old, Servers: 4, F: 1}, now, rand.Reader)
	require.NoError(t, err)
	editCluster(t, old, func(cf *clusterFile) { cf.Approver = "" })
	require.NoError(t, os.Remove(filepath.Join(old, CADirName, OperatorKeyFile)))
	p, err = PlanChange(old, Change{Remove: sid(2), Add: true}, now, rand.Reader)
	require.NoError(t, err)
	require.Nil(t, p.Proposal.Approval)
	require.Empty(t, p.Next.Approvers)
	_, err = PlanChange(old, Change{RotateOperator: true}, now, rand.Reader)
	require.ErrorContains(t, err, "names no approver")
	require.ErrorContains(t, err, "bqserver init --open")
}

// docs/protocol.md change 65, a rotation: the proposal names a new
// operator key in place of the old and is approved by the old; the new key
// waits beside the old until the epoch is endorsed, then takes its place in
// DIR/ca/operator.key; the next change is approved by the new key, and
// names it. It is a change of its own, and a closed cluster has none.
func TestRotateOperatorHandsTheApprovalToANewKey(t *testing.T) {
	dir, c := newCluster(t)
	now := time.Now()
	_, err := PlanChange(dir, Change{RotateOperator: true, RotateCA: true}, now, rand.Reader)
	require.ErrorContains(t, err, "a change of its own")
	p, err := PlanChange(dir, Change{RotateOperator: true}, now, rand.Reader)
	require.NoError(t, err)
	require.NotNil(t, p.NextOperator)
	require.Equal(t, []crypto.PublicKey{p.NextOperator.Public.Wire}, p.Next.Approvers, "the new key alone")
	require.NoError(t, wire.VerifyApproval([]*crypto.Parsed{c.Approver}, c.ID(), 1, p.Proposal.Proposal, p.Proposal.Approval),
		"approved by the old key")
	require.NoError(t, p.Write(dir))
	next := filepath.Join(dir, CADirName, operatorNextKeyFile)
	st, err := os.Stat(next)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	k, err := LoadOperatorKey(dir)
	require.NoError(t, err)
	require.Equal(t, c.Approver.ID, k.Public.ID, "until the epoch counts, the old key is in force")

	endorseWritten(t, dir, p)
	_, err = os.Stat(next)
	require.ErrorIs(t, err, os.ErrNotExist)
	k, err = LoadOperatorKey(dir)
	require.NoError(t, err)
	require.Equal(t, p.NextOperator.Public.ID, k.Public.ID, "the new key took the old one's place")

	p2, err := PlanChange(dir, Change{Remove: sid(3), Add: true}, now, rand.Reader)
	require.NoError(t, err)
	require.NoError(t, wire.VerifyApproval([]*crypto.Parsed{p.NextOperator.Public}, c.ID(), 2, p2.Proposal.Proposal, p2.Proposal.Approval))
	require.Error(t, wire.VerifyApproval([]*crypto.Parsed{c.Approver}, c.ID(), 2, p2.Proposal.Proposal, p2.Proposal.Approval), "not the old key")
	require.Equal(t, []crypto.PublicKey{p.NextOperator.Public.Wire}, p2.Next.Approvers)

	// The old key put back by mistake is no key in force: refused, said so.
	old, err := os.ReadFile(filepath.Join(dir, CADirName, OperatorKeyFile))
	require.NoError(t, err)
	other := filepath.Join(t.TempDir(), "other")
	_, err = Init(InitOptions{Dir: other, Servers: 4, F: 1}, now, rand.Reader)
	require.NoError(t, err)
	stale, err := os.ReadFile(filepath.Join(other, CADirName, OperatorKeyFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, CADirName, OperatorKeyFile), stale, 0o600))
	_, err = PlanChange(dir, Change{Remove: sid(3), Add: true}, now, rand.Reader)
	require.ErrorContains(t, err, "is not the key of an approver in force")
	require.NoError(t, os.WriteFile(filepath.Join(dir, CADirName, OperatorKeyFile), old, 0o600))

	closedDir, _ := newClusterWith(t, InitOptions{Servers: 4, F: 1, Closed: true})
	_, err = PlanChange(closedDir, Change{RotateOperator: true}, now, rand.Reader)
	require.ErrorContains(t, err, "closed")
	require.True(t, strings.Contains(err.Error(), "rotate-clients"))
}
