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
	for s, why := range showThiefsProposals(t, dir, signer) {
		require.Contains(t, why, "not approved", "server %d", s)
	}

	out, code := runCLI(t, "bqserver", "server", "replace", "3", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "epoch 1 endorsed by servers ")
	require.Contains(t, out, "server 4 is new")
	for _, i := range []int{0, 1, 2} {
		servers[i].waitFor(20*time.Second, 1, `msg="serving the cluster's epoch"`, "epoch=1")
	}
	s4 := start(t, "s4", nil, bin("bqserver"), "run", "--dir", dir, "--id", "4")
	s4.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
	chain, _, err := cl.ChainIn(dir)
	require.NoError(t, err)
	require.Equal(t, []crypto.PublicKey{cl.Approver.Wire}, chain.Body(1).Approvers, "epoch 1 is the operator's: it names the operator key, not the thief's")
}

// docs/protocol.md change 65, a rotation with real processes: 'bqserver ca
// rotate-operator' puts a new operator key in DIR/ca/operator.key once the
// members endorse the epoch naming it; the old key, with the CA's, then
// approves nothing (a thief holding both shows each member a proposal:
// refused), and the operator's next change, approved by the new key,
// completes.
func TestRotateTheOperatorKeyOnARunningCluster(t *testing.T) {
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)
	keyFile := filepath.Join(dir, certs.CADirName, certs.OperatorKeyFile)
	old, err := certs.LoadOperatorKey(dir)
	require.NoError(t, err)

	out, code := runCLI(t, "bqserver", "ca", "rotate-operator", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "epoch 1 endorsed by servers ")
	require.Contains(t, out, "a new operator key approves every change after epoch 1")
	for _, i := range []int{0, 1, 2, 3} {
		servers[i].waitFor(20*time.Second, 1, `msg="serving the cluster's epoch"`, "epoch=1")
	}
	now, err := certs.LoadOperatorKey(dir)
	require.NoError(t, err)
	require.NotEqual(t, old.Public.ID, now.Public.ID, keyFile+" holds the new key")
	_, err = os.Stat(filepath.Join(dir, certs.CADirName, "operator-next.key"))
	require.ErrorIs(t, err, os.ErrNotExist)

	for s, why := range showThiefsProposals(t, dir, old) {
		require.Contains(t, why, "no approver in force signed", "server %d: the retired key approves nothing", s)
	}
	out, code = runCLI(t, "bqserver", "server", "replace", "3", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "epoch 2 endorsed by servers ")
}

// showThiefsProposals shows each running member of the newest epoch in dir
// a different proposal of the next epoch (the same members, naming an
// approver key of the thief's), signed with the cluster CA's key in dir and
// approved with approve, and returns each member's refusal; it fails the
// test if a member endorses one.
func showThiefsProposals(t *testing.T, dir string, approve *crypto.PrivateKey) map[wire.ServerID]string {
	t.Helper()
	cl, err := certs.LoadCluster(filepath.Join(dir, certs.ClusterFileName))
	require.NoError(t, err)
	chain, epochs, err := cl.ChainIn(dir)
	require.NoError(t, err)
	ca, err := certs.LoadCA(dir)
	require.NoError(t, err)
	signer, err := ca.EpochSigner()
	require.NoError(t, err)
	n := chain.Number() + 1
	prev := [32]byte(cl.ID())
	var members []wire.EpochMember
	if b := chain.Current(); b != nil {
		prev, members = wire.EpochHash(epochs[len(epochs)-1].Signed), b.Members
	} else {
		for _, s := range cl.Servers {
			members = append(members, wire.EpochMember{ID: s.ID, Address: s.Address, Key: s.SigningKey.Wire, Cert: s.Cert.Raw, Endorse: s.Endorse})
		}
	}
	proposals := map[wire.ServerID]*wire.Endorse{}
	for _, m := range members {
		own, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
		require.NoError(t, err)
		signed, err := wire.SignEpoch(signer, &wire.EpochBody{Cluster: cl.ID(), Number: n, Prev: prev, Members: members, F: uint16(chain.Faults(n - 1)),
			Approvers: []crypto.PublicKey{own.Public.Wire}})
		require.NoError(t, err)
		a, err := wire.SignApproval(approve, cl.ID(), n, signed)
		require.NoError(t, err)
		proposals[m.ID] = &wire.Endorse{Proposal: signed, Approval: &a}
	}
	now, err := cl.MembersOf(chain, n-1)
	require.NoError(t, err)
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	require.NoError(t, err)
	tr, err := transport.DialClient(transport.ClientConfig{
		Key: key, Cluster: cl.ID(), Servers: now.Addresses(), CAPool: cl.CAPoolOf(chain), IdentifyServer: now.ByCert,
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	defer tr.Close()
	refused := map[wire.ServerID]string{}
	deadline := time.After(30 * time.Second)
	for len(refused) < len(members) {
		select {
		case in := <-tr.Inbound():
			switch {
			case in.Kind == transport.EventConnected:
				require.NoError(t, tr.Send(wire.ServerPeer(in.From.Server), &wire.Message{Endorse: proposals[in.From.Server]}))
			case in.Kind == transport.EventMessage && in.Msg.Endorse != nil:
				t.Fatalf("server %d endorsed the thief's epoch %d", in.From.Server, n)
			case in.Kind == transport.EventMessage && in.Msg.Error != nil:
				refused[in.From.Server] = in.Msg.Error.Detail
			}
		case <-deadline:
			t.Fatalf("only %d servers answered the thief's proposals: %v", len(refused), refused)
		}
	}
	return refused
}
