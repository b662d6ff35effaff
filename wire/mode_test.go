package wire_test

import (
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// docs/protocol.md change 60: a Doorway, Ticket or Held may ask for a shared
// holding or k permits (2 ≤ k ≤ MaxPermits); every other combination is
// refused, and an exclusive statement is encoded as in protocol 1.8 (no
// mode on the wire).
func TestStatementModes(t *testing.T) {
	f := fx(t)
	a := id(f.alice)
	jh := digest("J")
	st := func(p wire.Phase, m wire.Mode, k uint32) wire.Statement {
		s := wire.Statement{Lock: testLock, Client: a, Session: 1, Attempt: 1, Phase: p, Mode: m, Permits: k}
		switch p {
		case wire.PhaseTicket:
			s.N, s.JHash = 3, jh
		case wire.PhaseHeld:
			s.N = 3
		}
		return s
	}
	for _, p := range []wire.Phase{wire.PhaseDoorway, wire.PhaseTicket, wire.PhaseHeld} {
		for _, h := range []wire.Holding{{Mode: wire.ModeShared}, {Mode: wire.ModePermits, Permits: 2}, {Mode: wire.ModePermits, Permits: wire.MaxPermits}} {
			s := st(p, h.Mode, h.Permits)
			signed, err := wire.SignStatement(f.alice, testCluster(), &s)
			require.NoError(t, err)
			got, err := signed.Verify(testCluster())
			require.NoError(t, err, "%s", &s)
			require.Equal(t, h, wire.HoldingOf(got))
		}
	}
	for name, c := range map[string]struct {
		s        wire.Statement
		contains string
	}{
		"exit shared":       {st(wire.PhaseExit, wire.ModeShared, 0), "an Exit carries no mode"},
		"exit with permits": {st(wire.PhaseExit, wire.ModeExclusive, 3), "an Exit carries no mode"},
		"exclusive permits": {st(wire.PhaseDoorway, wire.ModeExclusive, 3), "exclusive statement carries permits"},
		"shared permits":    {st(wire.PhaseTicket, wire.ModeShared, 3), "shared statement carries permits"},
		"one permit":        {st(wire.PhaseDoorway, wire.ModePermits, 1), "1 permits"},
		"no permits":        {st(wire.PhaseDoorway, wire.ModePermits, 0), "0 permits"},
		"too many permits":  {st(wire.PhaseHeld, wire.ModePermits, wire.MaxPermits+1), "1025 permits"},
		"unknown mode":      {st(wire.PhaseDoorway, wire.ModePermits+1, 0), "unknown mode 3"},
	} {
		signed := sealStatement(t, f.alice, crypto.DomainStatement, c.s)
		_, err := signed.Verify(testCluster())
		require.Error(t, err, name)
		requireInvalid(t, err, c.contains)
	}

	// Exclusive is the 1.8 encoding: no key 9 or 10.
	ex := st(wire.PhaseTicket, wire.ModeExclusive, 0)
	signed, err := wire.SignStatement(f.alice, testCluster(), &ex)
	require.NoError(t, err)
	type v18 struct {
		Lock    string         `cbor:"1,keyasint"`
		Client  wire.ClientID  `cbor:"2,keyasint"`
		Session uint64         `cbor:"3,keyasint"`
		Attempt uint64         `cbor:"4,keyasint"`
		Phase   wire.Phase     `cbor:"5,keyasint"`
		N       uint64         `cbor:"6,keyasint,omitempty"`
		JHash   *wire.Digest   `cbor:"7,keyasint,omitempty"`
		Cluster wire.ClusterID `cbor:"8,keyasint"`
	}
	old, err := crypto.Marshal(&v18{Lock: ex.Lock, Client: a, Session: 1, Attempt: 1, Phase: ex.Phase, N: 3, JHash: jh, Cluster: testCluster()})
	require.NoError(t, err)
	require.Equal(t, old, signed.Signed.Body)
}

// Change 60's compatibility: shared with shared, permits with permits of the
// same count, exclusive with nothing; capacities 1, none, k.
func TestHoldingCompatibility(t *testing.T) {
	ex, sh := wire.Holding{}, wire.Holding{Mode: wire.ModeShared}
	p3, p4 := wire.Holding{Mode: wire.ModePermits, Permits: 3}, wire.Holding{Mode: wire.ModePermits, Permits: 4}
	all := []wire.Holding{ex, sh, p3, p4}
	for _, h := range all {
		for _, o := range all {
			want := h == o && h != ex
			require.Equal(t, want, h.Compatible(o), "%s with %s", h, o)
		}
	}
	require.Equal(t, 1, ex.Capacity())
	require.Equal(t, 0, sh.Capacity())
	require.Equal(t, 3, p3.Capacity())
}
