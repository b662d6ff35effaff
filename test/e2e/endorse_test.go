package e2e

import (
	"crypto/rand"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
)

// docs/protocol.md change 49 with real processes: whoever holds the cluster
// CA's key alone — a thief with ca.key and nothing else — signs an epoch that
// drops server 3 for a member of its own. Shown to every running server over
// QUIC, it moves none of them: each refuses it for want of q endorsements.
// A bqclient given it as a file refuses to start on it, saying why. The
// operator's own change, endorsed by the members, then goes through.
func TestCAKeyAloneChangesNothing(t *testing.T) {
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)

	// The thief's epoch: the operator's tooling signs it with ca.key; the
	// proposal is all a CA key makes.
	p, err := certs.PlanChange(dir, certs.Change{Remove: ptrID(3), Add: true}, time.Now(), rand.Reader)
	require.NoError(t, err)
	require.NoError(t, p.Write(dir))
	caOnly := wire.Epoch{Signed: p.Proposal.Proposal}

	cl, err := certs.LoadCluster(filepath.Join(dir, certs.ClusterFileName))
	require.NoError(t, err)
	chain, _, err := cl.ChainIn(dir)
	require.NoError(t, err)
	members, err := cl.MembersOf(chain, 0)
	require.NoError(t, err)
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	require.NoError(t, err)
	tr, err := transport.DialClient(transport.ClientConfig{
		Key: key, Cluster: cl.ID(), Servers: members.Addresses(), CAPool: cl.CAPoolOf(chain), IdentifyServer: members.ByCert,
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	defer tr.Close()
	refused := map[wire.ServerID]string{}
	deadline := time.After(30 * time.Second)
	for len(refused) < 4 {
		select {
		case in := <-tr.Inbound():
			switch {
			case in.Kind == transport.EventConnected:
				require.NoError(t, tr.Send(wire.ServerPeer(in.From.Server), &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{caOnly})}))
			case in.Kind == transport.EventMessage && in.Msg.Error != nil:
				refused[in.From.Server] = in.Msg.Error.Detail
			}
		case <-deadline:
			t.Fatalf("only %d servers answered the CA-only epoch: %v", len(refused), refused)
		}
	}
	for s, why := range refused {
		require.Contains(t, why, "endorsed by 0 members of epoch 0", "server %d", s)
	}

	// A client handed the CA-only epoch as a file refuses it.
	clientDir := filepath.Join(t.TempDir(), "client")
	require.NoError(t, os.MkdirAll(clientDir, 0o755))
	data, err := os.ReadFile(filepath.Join(dir, certs.ClusterFileName))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(clientDir, certs.ClusterFileName), data, 0o644))
	require.NoError(t, certs.WriteEpoch(clientDir, 1, caOnly))
	out, code := runCLI(t, "bqclient", "--cluster", filepath.Join(clientDir, certs.ClusterFileName), "--identity", filepath.Join(t.TempDir(), "c.key"),
		"lock", "demo", "--timeout", "10s", "--", "true")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "endorse", out)

	// The operator's change — the same proposal — endorsed by the members:
	// it is the one epoch 1 there is.
	out, code = runCLI(t, "bqserver", "server", "push", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "epoch 1 endorsed by servers ")
	for _, i := range []int{0, 1, 2} {
		servers[i].waitFor(20*time.Second, 1, `msg="serving the cluster's epoch"`, "epoch=1")
	}
	require.False(t, strings.Contains(servers[0].output(), "epoch=2"))
}

func ptrID(i int) *wire.ServerID { id := wire.ServerID(i); return &id }

// Issue 54, item 3 (docs/protocol.md change 65) with real processes: a
// thief holding the cluster CA's key and nothing else — not operator.key —
// shows each running member a different epoch 1 of its own (the same
// members, naming an approver key of the thief's), approved with the CA's
// key, before the operator acts. Were an open cluster's members to endorse
// what the CA signed, each would endorse the one it saw and refuse every
// other epoch 1 for good: the operator's next change could never count.
// Each refuses it, for want of the operator's approval, and endorses
// nothing; the operator's 'bqserver server replace', approved with
// DIR/ca/operator.key, then completes as usual and the new member serves.
func TestALeakedCAKeyFreezesNoChange(t *testing.T) {
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)

	cl, err := certs.LoadCluster(filepath.Join(dir, certs.ClusterFileName))
	require.NoError(t, err)
	require.NotNil(t, cl.Approver, "init --open names an approver")
	ca, err := certs.LoadCA(dir) // ca.key: what the thief holds
	require.NoError(t, err)
	signer, err := ca.EpochSigner()
	require.NoError(t, err)
	var members []wire.EpochMember
	for _, s := range cl.Servers {
		members = append(members, wire.EpochMember{ID: s.ID, Address: s.Address, Key: s.SigningKey.Wire, Cert: s.Cert.Raw, Endorse: s.Endorse})
	}
	proposals := map[wire.ServerID]*wire.Endorse{}
	for _, s := range cl.Servers {
		own, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
		require.NoError(t, err)
		signed, err := wire.SignEpoch(signer, &wire.EpochBody{Cluster: cl.ID(), Number: 1, Prev: [32]byte(cl.ID()), Members: members, F: uint16(cl.F),
			Approvers: []crypto.PublicKey{own.Public.Wire}})
		require.NoError(t, err)
		a, err := wire.SignApproval(signer, cl.ID(), 1, signed)
		require.NoError(t, err)
		proposals[s.ID] = &wire.Endorse{Proposal: signed, Approval: &a}
	}

	chain, _, err := cl.ChainIn(dir)
	require.NoError(t, err)
	m0, err := cl.MembersOf(chain, 0)
	require.NoError(t, err)
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	require.NoError(t, err)
	tr, err := transport.DialClient(transport.ClientConfig{
		Key: key, Cluster: cl.ID(), Servers: m0.Addresses(), CAPool: cl.CAPoolOf(chain), IdentifyServer: m0.ByCert,
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	defer tr.Close()
	refused := map[wire.ServerID]string{}
	deadline := time.After(30 * time.Second)
	for len(refused) < 4 {
		select {
		case in := <-tr.Inbound():
			switch {
			case in.Kind == transport.EventConnected:
				require.NoError(t, tr.Send(wire.ServerPeer(in.From.Server), &wire.Message{Endorse: proposals[in.From.Server]}))
			case in.Kind == transport.EventMessage && in.Msg.Endorse != nil:
				t.Fatalf("server %d endorsed the thief's epoch 1", in.From.Server)
			case in.Kind == transport.EventMessage && in.Msg.Error != nil:
				refused[in.From.Server] = in.Msg.Error.Detail
			}
		case <-deadline:
			t.Fatalf("only %d servers answered the thief's proposals: %v", len(refused), refused)
		}
	}
	for s, why := range refused {
		require.Contains(t, why, "not approved", "server %d", s)
	}
	tr.Close()

	out, code := runCLI(t, "bqserver", "server", "replace", "3", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "epoch 1 endorsed by servers ")
	require.Contains(t, out, "server 4 is new")
	for _, i := range []int{0, 1, 2} {
		servers[i].waitFor(20*time.Second, 1, `msg="serving the cluster's epoch"`, "epoch=1")
	}
	s4 := start(t, "s4", nil, bin("bqserver"), "run", "--dir", dir, "--id", "4")
	s4.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
	chain, _, err = cl.ChainIn(dir)
	require.NoError(t, err)
	require.Equal(t, []crypto.PublicKey{cl.Approver.Wire}, chain.Body(1).Approvers, "epoch 1 is the operator's: it names the operator key, not the thief's")
}
