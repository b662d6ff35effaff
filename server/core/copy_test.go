package core

import (
	"crypto/rand"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// withCA remakes c's cores with a cluster CA, which signs epochs.
func (c *cluster) withCA() *crypto.PrivateKey {
	ca, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(c.t, err)
	c.clusterCA = ca
	for i := range c.cores {
		c.cores[i] = c.newCore(i, len(c.cores), c.cores[i].cfg.F)
	}
	return ca
}

// copyTo takes the Copy parts in flight to server to, in order.
func (c *cluster) copyTo(to wire.ServerID) []*wire.Copy {
	var out []*wire.Copy
	keep := c.inflight[:0]
	for _, m := range c.inflight {
		msg, err := wire.Decode(m.data)
		require.NoError(c.t, err)
		if m.to == to && msg.Copy != nil {
			out = append(out, msg.Copy)
		} else {
			keep = append(keep, m)
		}
	}
	c.inflight = keep
	return out
}

// docs/protocol.md change 43, the copy's sealed side: a server that sealed
// its epoch hands its state — register values (a Ticket with its J, a Held
// after its Ticket), each lock's hw, certificates and the clients' sessions
// — to a member of the newest epoch that asks, in numbered parts of one
// state, the last marked; a server that is no member of the newest epoch
// (server 3, removed) is not answered, nor is anyone before the seal.
func TestSealedServerHandsOutItsState(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	w, x, z := c.newClient(), c.newClient(), c.newClient()
	j := c.doorway(w, "L", 1, 1)
	tk := w.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	c.fromClient(0, w.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	c.fromClient(0, w.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: w.stmt("L", 1, 1, wire.PhaseHeld, 1, nil)}})
	c.doorway(x, "M", 1, 1)
	c.doorway(z, "M", 1, 1)
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(z.id, 1, c.cores[0].q)})
	c.drop()

	ask := &wire.Message{CopyRequest: &wire.CopyRequest{Epoch: 0}}
	c.fromServer(0, 4, ask)
	require.Empty(t, c.copyTo(4), "no copy before the seal")

	c.fromClient(0, x.id, &wire.Message{EpochNews: &wire.EpochNews{Epochs: []crypto.Signed{c.epochOne(ca)}}})
	c.drop()
	c.fromServer(0, 3, ask)
	require.Empty(t, c.copyTo(3), "server 3 is no member of epoch 1")
	c.fromServer(0, 4, &wire.Message{CopyRequest: &wire.CopyRequest{Epoch: 1}})
	require.Empty(t, c.copyTo(4), "epoch 1 is not the sealed one")

	c.fromServer(0, 4, ask)
	parts := c.copyTo(4)
	require.Len(t, parts, 1)
	p := parts[0]
	require.Equal(t, uint64(1), p.Part)
	require.True(t, p.Last)
	require.Zero(t, p.Epoch)

	phases := map[wire.ClientID][]wire.Phase{}
	for _, f := range p.Registers {
		st, err := f.Statement.Verify(c.keys.Cluster)
		require.NoError(t, err)
		phases[st.Client] = append(phases[st.Client], st.Phase)
		if st.Phase == wire.PhaseTicket {
			require.Equal(t, j, f.J, "a Ticket goes with its J")
		}
	}
	require.Equal(t, map[wire.ClientID][]wire.Phase{w.id: {wire.PhaseTicket, wire.PhaseHeld}, x.id: {wire.PhaseDoorway}}, phases,
		"z's value was voided by its certificate")
	require.Len(t, p.HW, 1)
	require.Equal(t, tk.Signed.Body, p.HW[0].Signed.Body, "L's hw is w's Ticket")
	require.Len(t, p.Certs, 1)
	require.Equal(t, z.id, p.Certs[0].Client)
	sessions := map[wire.ClientID]wire.CopyClient{}
	for _, cc := range p.Clients {
		sessions[cc.Client] = cc
	}
	require.Equal(t, []wire.CopySession{{Session: 1, TTLMillis: 5000}}, sessions[w.id].Sessions)
	require.Equal(t, uint64(1), sessions[w.id].SpokeUpTo)
	require.Equal(t, uint64(1), sessions[z.id].ResetUpTo)

	// In small parts: numbered, the last marked, the same entries.
	small := c.cores[0].copyParts(1)
	require.Greater(t, len(small), 5)
	var registers []wire.Forward
	for i, sp := range small {
		require.Equal(t, uint64(i+1), sp.Part)
		require.Equal(t, i == len(small)-1, sp.Last)
		registers = append(registers, sp.Registers...)
		b, err := wire.Encode(&wire.Message{Copy: sp})
		require.NoError(t, err)
		_, err = wire.Decode(b)
		require.NoError(t, err)
	}
	require.Equal(t, p.Registers, registers)
}
