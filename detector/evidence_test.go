package detector

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// §2, §6 with change 2: what convicts a client, and what proves nothing.
// Equivocation is two different statements of one client, lock and
// timestamp; an invalid Ticket is one whose own J (the one its signature
// names) does not justify it. Anything else is no evidence, so no faulty
// server can frame a correct client.
func TestEvidenceRule(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	key := func() *crypto.PrivateKey {
		k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		require.NoError(t, err)
		return k
	}
	alice, bob := key(), key()
	verify := func(ss *wire.SignedStatement) (*wire.Statement, error) { return ss.Verify(f.keys.Cluster) }
	sign := func(k *crypto.PrivateKey, lock string, att uint64, ph wire.Phase, n uint64, j []wire.SignedView) wire.SignedStatement {
		st := &wire.Statement{Lock: lock, Client: wire.ClientID(k.Public.ID), Session: 1, Attempt: att, Phase: ph, N: n}
		if ph == wire.PhaseTicket {
			h := wire.JustificationHash(j)
			st.JHash = &h
		}
		ss, err := wire.SignStatement(k, f.keys.Cluster, st)
		require.NoError(t, err)
		return ss
	}
	justification := func(k *crypto.PrivateKey, seq uint64) []wire.SignedView {
		var j []wire.SignedView
		for s := range 3 {
			v, err := wire.SignView(f.signers[s], f.keys.Cluster, &wire.ViewBody{Lock: "L", For: wire.ClientID(k.Public.ID), ForSession: 1, ForAttempt: 1, Server: wire.ServerID(s), Seq: seq})
			require.NoError(t, err)
			j = append(j, v)
		}
		return j
	}
	j, otherJ := justification(alice, 1), justification(alice, 2) // both justify N = 1
	eq := func(a, b wire.SignedStatement) *wire.Evidence {
		return &wire.Evidence{Kind: wire.EvidenceEquivocation, A: a, B: &b}
	}
	t1, t2 := sign(alice, "L", 1, wire.PhaseTicket, 1, j), sign(alice, "L", 1, wire.PhaseTicket, 2, j)
	for _, tc := range []struct {
		name     string
		ev       *wire.Evidence
		convicts bool
	}{
		{"two Tickets of one attempt", eq(t1, t2), true},
		{"two Exits of one attempt, different locks", eq(sign(alice, "L", 1, wire.PhaseExit, 0, nil), sign(alice, "M", 1, wire.PhaseExit, 0, nil)), false},
		{"one statement twice", eq(t1, t1), false},
		{"Tickets of two attempts", eq(t1, sign(alice, "L", 2, wire.PhaseTicket, 5, j)), false},
		{"the Doorway and the Ticket of one attempt", eq(sign(alice, "L", 1, wire.PhaseDoorway, 0, nil), t1), false},
		{"two clients", eq(t1, sign(bob, "L", 1, wire.PhaseTicket, 2, j)), false},
		{"equivocation with one statement", &wire.Evidence{Kind: wire.EvidenceEquivocation, A: t1}, false},
		{"a Ticket its own J does not justify", &wire.Evidence{Kind: wire.EvidenceInvalidTicket, A: t2, J: j}, true},
		{"a Ticket shown with a J it did not sign", &wire.Evidence{Kind: wire.EvidenceInvalidTicket, A: sign(alice, "L", 1, wire.PhaseTicket, 1, j), J: otherJ}, false},
		{"a justified Ticket", &wire.Evidence{Kind: wire.EvidenceInvalidTicket, A: t1, J: j}, false},
		{"not a Ticket", &wire.Evidence{Kind: wire.EvidenceInvalidTicket, A: sign(alice, "L", 1, wire.PhaseHeld, 1, nil), J: j}, false},
	} {
		c, err := CheckEvidence(tc.ev, f.keys, 3, verify)
		if tc.convicts {
			require.NoError(t, err, tc.name)
			require.Equal(t, wire.ClientID(alice.Public.ID), c, tc.name)
		} else {
			require.ErrorIs(t, err, ErrNotEvidence, tc.name)
		}
	}
}
