package server

import (
	"crypto/rand"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// docs/protocol.md change 65, the runtime's side: the core a server of an
// open cluster runs takes the cluster file's approver, so it refuses a
// proposal the cluster CA signed without the operator key's approval and
// endorses the operator's approved one. Else an open cluster's servers
// would endorse whatever a leaked CA key signed first, whatever the core's
// rule says.
func TestAnOpenClustersServerEndorsesOnlyApprovedEpochs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	now := time.Now()
	_, err := certs.Init(certs.InitOptions{Dir: dir, Servers: 4, F: 1, Host: "127.0.0.1", PortBase: 7400}, now, rand.Reader)
	require.NoError(t, err)
	three := wire.ServerID(3)
	p, err := certs.PlanChange(dir, certs.Change{Remove: &three, Add: true}, now, rand.Reader)
	require.NoError(t, err)
	require.NotNil(t, p.Proposal.Approval)
	m, err := certs.LoadServer(dir, 0)
	require.NoError(t, err)
	k, err := NewProtocolCore(m, nil)
	require.NoError(t, err)
	op, err := crypto.GenerateKey(m.Cluster.Scheme, rand.Reader)
	require.NoError(t, err)
	step := func(en *wire.Endorse) *wire.Message {
		e := k.Step(now, core.Input{From: wire.ClientPeer(wire.ClientID(op.Public.ID)), Msg: &wire.Message{Endorse: en}})
		for _, o := range e.Send {
			if o.To.IsClient {
				return o.Msg
			}
		}
		t.Fatal("no answer to the operator")
		return nil
	}
	got := step(&wire.Endorse{Proposal: p.Proposal.Proposal})
	require.NotNil(t, got.Error, "the CA's signature alone: refused")
	require.Contains(t, got.Error.Detail, "not approved")
	got = step(p.Proposal)
	require.Nil(t, got.Error)
	require.NotNil(t, got.Endorse, "approved with operator.key: endorsed")
}
