package wire_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// sealStatement signs any body as a statement of k, bypassing SignStatement's
// check, the way a Byzantine client would.
func sealStatement(tb testing.TB, k *crypto.PrivateKey, d crypto.Domain, body any) wire.SignedStatement {
	tb.Helper()
	s, err := crypto.Seal(k, d, body)
	require.NoError(tb, err)
	return wire.SignedStatement{Key: k.Public.Wire, Signed: s}
}

// signRaw signs exact body bytes as a statement of k.
func signRaw(k *crypto.PrivateKey, body []byte) wire.SignedStatement {
	return wire.SignedStatement{Key: k.Public.Wire, Signed: crypto.Signed{Body: body, Sig: k.Sign(crypto.DomainStatement, body)}}
}

func requireInvalid(tb testing.TB, err error, contains string) {
	tb.Helper()
	require.Error(tb, err)
	require.True(tb, errors.Is(err, wire.ErrInvalid), "%v does not wrap ErrInvalid", err)
	require.True(tb, strings.HasPrefix(err.Error(), "wire: "), err.Error())
	if contains != "" {
		require.ErrorContains(tb, err, contains)
	}
}

// docs/protocol.md §2: each phase carries N and H(J) exactly where the table says.
func TestStatementVerifyAcceptsEachPhase(t *testing.T) {
	f := fx(t)
	jh := digest("J")
	for _, k := range []*crypto.PrivateKey{f.alice, f.pq, f.hybrid} {
		for _, st := range []wire.Statement{
			{Lock: testLock, Client: id(k), Session: 1, Attempt: 1, Phase: wire.PhaseDoorway},
			{Lock: testLock, Client: id(k), Session: 1, Attempt: 1, Phase: wire.PhaseTicket, N: 1, JHash: jh},
			{Lock: testLock, Client: id(k), Session: 1, Attempt: 1, Phase: wire.PhaseTicket, N: wire.TicketCap - 1, JHash: jh},
			{Lock: testLock, Client: id(k), Session: 1, Attempt: 1, Phase: wire.PhaseHeld, N: 9},
			{Lock: testLock, Client: id(k), Session: 1, Attempt: 1, Phase: wire.PhaseHeld, N: wire.TicketCap - 1},
			{Lock: testLock, Client: id(k), Session: math.MaxUint64, Attempt: math.MaxUint64, Phase: wire.PhaseExit},
		} {
			s, err := wire.SignStatement(k, testCluster(), &st)
			require.NoError(t, err)
			got, err := s.Verify(testCluster())
			require.NoError(t, err, "%s by %s", &st, k.Scheme())
			require.Equal(t, &st, got)
			require.Equal(t, wire.ClientIDOf(s.Key), got.Client)
		}
	}
}

func TestStatementVerifyRejects(t *testing.T) {
	f := fx(t)
	jh := digest("J")
	a := id(f.alice)
	st := func(p wire.Phase, n uint64, j *wire.Digest) wire.Statement {
		return wire.Statement{Lock: testLock, Client: a, Session: 1, Attempt: 1, Phase: p, N: n, JHash: j}
	}
	withLock := func(l string) wire.Statement { s := st(wire.PhaseDoorway, 0, nil); s.Lock = l; return s }
	cases := []struct {
		name     string
		s        wire.SignedStatement
		contains string
	}{
		{"client is not the key's", sealStatement(t, f.alice, crypto.DomainStatement, wire.Statement{Lock: testLock, Client: id(f.bob), Session: 1, Attempt: 1, Phase: wire.PhaseDoorway}), "signed by key of"},
		{"key of another client", func() wire.SignedStatement {
			s := sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseDoorway, 0, nil))
			s.Key = f.bob.Public.Wire
			return s
		}(), "bad signature"},
		{"N on Doorway", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseDoorway, 3, nil)), "carries a ticket"},
		{"JHash on Doorway", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseDoorway, 0, jh)), "carries a ticket"},
		{"N on Exit", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseExit, 3, nil)), "carries a ticket"},
		{"JHash on Exit", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseExit, 0, jh)), "carries a ticket"},
		{"Ticket without N", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseTicket, 0, jh)), "Ticket without"},
		{"Ticket without JHash", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseTicket, 4, nil)), "Ticket without"},
		{"Held with JHash", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseHeld, 4, jh)), "Held without N"},
		{"Held without N", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseHeld, 0, nil)), "Held without N"},
		{"phase none", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseNone, 0, nil)), "unknown phase 0"},
		{"phase 5", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseExit+1, 0, nil)), "unknown phase 5"},
		{"phase 255", sealStatement(t, f.alice, crypto.DomainStatement, st(255, 1, jh)), "unknown phase 255"},
		{"Ticket N = cap", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseTicket, wire.TicketCap, jh)), "cap"},
		{"Ticket N = max", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseTicket, math.MaxUint64, jh)), "cap"},
		{"Held N = cap", sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseHeld, wire.TicketCap, nil)), "cap"},
		{"empty lock", sealStatement(t, f.alice, crypto.DomainStatement, withLock("")), "empty lock name"},
		{"lock too long", sealStatement(t, f.alice, crypto.DomainStatement, withLock(strings.Repeat("l", wire.MaxLockName+1))), "exceeds"},
		{"lock with newline", sealStatement(t, f.alice, crypto.DomainStatement, withLock("a\nb")), "control character"},
		{"lock with NEL", sealStatement(t, f.alice, crypto.DomainStatement, withLock("a\u0085b")), "control character"},
		{"signed as a view", sealStatement(t, f.alice, crypto.DomainView, st(wire.PhaseDoorway, 0, nil)), "bad signature"},
		{"signed as a vote", sealStatement(t, f.alice, crypto.DomainSuspect, st(wire.PhaseDoorway, 0, nil)), "bad signature"},
		{"signed as a hello", sealStatement(t, f.alice, crypto.DomainHello, st(wire.PhaseDoorway, 0, nil)), "bad signature"},
		{"unparseable key", func() wire.SignedStatement {
			s := sealStatement(t, f.alice, crypto.DomainStatement, st(wire.PhaseDoorway, 0, nil))
			s.Key.Scheme = "RSA"
			return s
		}(), "statement key"},
		{"empty", wire.SignedStatement{}, ""},
		{"another struct entirely", sealStatement(t, f.alice, crypto.DomainStatement, wire.SuspectBody{Client: a, Session: 1, Server: 1, Reason: 1}), ""},
		{"trailing byte", func() wire.SignedStatement {
			b, err := crypto.Marshal(st(wire.PhaseDoorway, 0, nil))
			require.NoError(t, err)
			return signRaw(f.alice, append(b, 0))
		}(), "trailing bytes"},
		{"N = 0 written out on Doorway (non-canonical)", func() wire.SignedStatement {
			b, err := crypto.Marshal(st(wire.PhaseDoorway, 0, nil))
			require.NoError(t, err)
			b[0]++ // one more pair in the map
			return signRaw(f.alice, append(b, 0x06, 0x00))
		}(), "deterministic"},
		{"session encoded non-minimally", signRaw(f.alice, unhex(t,
			"a6 01 6c"+hex.EncodeToString([]byte(testLock))+"02 58 20"+hex.EncodeToString(a[:])+"03 18 01 04 01 05 01"+clusterPair())), "deterministic"},
		{"keys out of order", signRaw(f.alice, unhex(t,
			"a6 02 58 20"+hex.EncodeToString(a[:])+"01 6c"+hex.EncodeToString([]byte(testLock))+"03 01 04 01 05 01"+clusterPair())), "deterministic"},
		{"client id as an array of 32 integers", signRaw(f.alice, unhex(t,
			"a6 01 6c"+hex.EncodeToString([]byte(testLock))+"02 98 20"+byteArray(a[:])+"03 01 04 01 05 01"+clusterPair())), "is an array, want a byte string"},
		{"client id of 31 bytes", signRaw(f.alice, unhex(t,
			"a6 01 6c"+hex.EncodeToString([]byte(testLock))+"02 58 1f"+hex.EncodeToString(a[:31])+"03 01 04 01 05 01"+clusterPair())), "client id has 31 bytes"},
		{"null JHash on Ticket", signRaw(f.alice, unhex(t,
			"a8 01 6c"+hex.EncodeToString([]byte(testLock))+"02 58 20"+hex.EncodeToString(a[:])+"03 01 04 01 05 02 06 01 07 f6"+clusterPair())), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.s.Verify(testCluster())
			requireInvalid(t, err, c.contains)
			require.Nil(t, got)
		})
	}
	// The hand-made bodies above are right apart from the one defect: fixed, they verify.
	good := signRaw(f.alice, unhex(t, "a6 01 6c"+hex.EncodeToString([]byte(testLock))+"02 58 20"+hex.EncodeToString(a[:])+"03 01 04 01 05 01"+clusterPair()))
	_, err := good.Verify(testCluster())
	require.NoError(t, err)
}

// clusterPair is the CBOR map entry 8: the fixture's cluster id, which a
// statement body ends with.
func clusterPair() string {
	id := testCluster()
	return "08 58 20" + hex.EncodeToString(id[:])
}

// byteArray renders b as CBOR unsigned integers, one per byte, without the array header.
func byteArray(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		if c < 24 {
			s.WriteString(hex.EncodeToString([]byte{c}))
		} else {
			s.WriteString(hex.EncodeToString([]byte{0x18, c}))
		}
	}
	return s.String()
}

func TestStatementVerifyRejectsTampering(t *testing.T) {
	f := fx(t)
	s, _ := f.aliceTicket(t)
	_, err := s.Verify(testCluster())
	require.NoError(t, err)
	for i := range s.Signed.Body {
		c := s
		c.Signed.Body = bytes.Clone(s.Signed.Body)
		c.Signed.Body[i] ^= 0x01
		_, err := c.Verify(testCluster())
		requireInvalid(t, err, "")
	}
	for i := range s.Signed.Sig {
		c := s
		c.Signed.Sig = bytes.Clone(s.Signed.Sig)
		c.Signed.Sig[i] ^= 0x80
		_, err := c.Verify(testCluster())
		requireInvalid(t, err, "bad signature")
	}
	c := s
	c.Signed.Sig = s.Signed.Sig[:len(s.Signed.Sig)-1]
	_, err = c.Verify(testCluster())
	requireInvalid(t, err, "bad signature")
}

func TestSignStatementRefusesForeignClient(t *testing.T) {
	f := fx(t)
	_, err := wire.SignStatement(f.alice, testCluster(), &wire.Statement{Lock: testLock, Client: id(f.bob), Phase: wire.PhaseDoorway})
	require.Error(t, err)
}

func TestViewVerify(t *testing.T) {
	f := fx(t)
	v := f.view(t, 1, f.alice, 3, 2)
	body, err := v.Verify(f.keys)
	require.NoError(t, err)
	require.Equal(t, wire.ServerID(1), body.Server)
	require.Equal(t, id(f.alice), body.For)
	require.Len(t, body.Members, 3)
	require.NotNil(t, body.HW)
	for _, m := range body.Members {
		_, err := m.Verify(testCluster())
		require.NoError(t, err)
	}
	_, err = body.HW.Verify(testCluster())
	require.NoError(t, err)

	sign := func(k *crypto.PrivateKey, d crypto.Domain, b wire.ViewBody) crypto.Signed {
		s, err := crypto.Seal(k, d, b)
		require.NoError(t, err)
		return s
	}
	vb := wire.ViewBody{Lock: testLock, For: id(f.alice), ForSession: 1, ForAttempt: 1, Server: 2, Seq: 1}
	flipped := v
	flipped.Signed.Sig = bytes.Clone(v.Signed.Sig)
	flipped.Signed.Sig[5] ^= 4
	badLock := vb
	badLock.Lock = ""
	cases := []struct {
		name     string
		v        wire.SignedView
		keys     wire.Keyring
		contains string
	}{
		{"unknown server", wire.SignedView{Server: 4, Signed: sign(f.servers[2], crypto.DomainView, vb)}, f.keys, "unknown server s4"},
		{"unknown server 65535", wire.SignedView{Server: 65535, Signed: v.Signed}, f.keys, "unknown server"},
		{"no keyring", v, wire.Keyring{}, "unknown server"},
		{"hole in the keyring", v, wire.Keyring{Cluster: f.keys.Cluster, Servers: []*crypto.Parsed{f.keys.Servers[0], nil, f.keys.Servers[2]}}, "unknown server"},
		{"body names another server", wire.SignedView{Server: 1, Signed: sign(f.servers[1], crypto.DomainView, vb)}, f.keys, "claims server s2 but is signed by s1"},
		{"signed by another server", wire.SignedView{Server: 2, Signed: sign(f.servers[1], crypto.DomainView, vb)}, f.keys, "bad signature"},
		{"signed by an outsider", wire.SignedView{Server: 2, Signed: sign(f.outsider, crypto.DomainView, vb)}, f.keys, "bad signature"},
		{"bad signature", flipped, f.keys, "bad signature"},
		{"signed as a statement", wire.SignedView{Server: 2, Signed: sign(f.servers[2], crypto.DomainStatement, vb)}, f.keys, "bad signature"},
		{"signed as a vote", wire.SignedView{Server: 2, Signed: sign(f.servers[2], crypto.DomainSuspect, vb)}, f.keys, "bad signature"},
		{"bad lock", wire.SignedView{Server: 2, Signed: sign(f.servers[2], crypto.DomainView, badLock)}, f.keys, "empty lock name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.v.Verify(c.keys)
			requireInvalid(t, err, c.contains)
			require.Nil(t, got)
		})
	}
}

func TestSuspectVerify(t *testing.T) {
	f := fx(t)
	v := f.vote(t, 3, id(f.carol), 4, wire.SuspectMute)
	body, err := v.Verify(f.keys)
	require.NoError(t, err)
	require.Equal(t, wire.SuspectBody{Client: id(f.carol), Session: 4, Server: 3, Reason: wire.SuspectMute, Cluster: f.keys.Cluster}, *body)

	other, err := crypto.Seal(f.servers[1], crypto.DomainSuspect, wire.SuspectBody{Client: id(f.carol), Session: 4, Server: 2, Reason: wire.SuspectMute})
	require.NoError(t, err)
	asView, err := crypto.Seal(f.servers[3], crypto.DomainView, wire.SuspectBody{Client: id(f.carol), Session: 4, Server: 3, Reason: wire.SuspectMute})
	require.NoError(t, err)
	for name, c := range map[string]struct {
		v        wire.SignedSuspect
		contains string
	}{
		"unknown server":          {wire.SignedSuspect{Server: 9, Signed: v.Signed}, "unknown server s9"},
		"other server's vote":     {wire.SignedSuspect{Server: 2, Signed: v.Signed}, "bad signature"},
		"body names other server": {wire.SignedSuspect{Server: 1, Signed: other}, "claims server s2"},
		"signed as a view":        {wire.SignedSuspect{Server: 3, Signed: asView}, "bad signature"},
		"empty":                   {wire.SignedSuspect{}, "bad signature"},
	} {
		got, err := c.v.Verify(f.keys)
		requireInvalid(t, err, c.contains)
		require.Nil(t, got, name)
	}
}

// docs/protocol.md §5: a reset certificate is valid votes on (c, sess) from q distinct servers.
func TestResetCertificateVerify(t *testing.T) {
	f := fx(t)
	c := id(f.carol)
	require.NoError(t, (&wire.ResetCertificate{Client: c, Session: 5, Votes: f.reset(t, c, 5, 0, 1, 2).Votes}).Verify(f.keys, f.q))
	require.NoError(t, ptr(f.reset(t, c, 5, 3, 1, 2)).Verify(f.keys, f.q), "any q servers, any order")
	require.NoError(t, ptr(f.reset(t, c, 5, 0, 1, 2, 3)).Verify(f.keys, f.q), "more than q")

	forged := f.vote(t, 2, c, 5, wire.SuspectMute)
	forged.Signed.Sig = bytes.Clone(forged.Signed.Sig)
	forged.Signed.Sig[0] ^= 1
	outsider, err := wire.SignSuspect(f.outsider, testCluster(), &wire.SuspectBody{Client: c, Session: 5, Server: 2, Reason: wire.SuspectMute})
	require.NoError(t, err)
	unknown, err := wire.SignSuspect(f.outsider, testCluster(), &wire.SuspectBody{Client: c, Session: 5, Server: 7, Reason: wire.SuspectMute})
	require.NoError(t, err)
	votes := func(vs ...wire.SignedSuspect) []wire.SignedSuspect { return vs }
	v := func(s int) wire.SignedSuspect { return f.vote(t, s, c, 5, wire.SuspectMute) }
	cases := []struct {
		name     string
		cert     wire.ResetCertificate
		contains string
	}{
		{"duplicate vote by one server", wire.ResetCertificate{Client: c, Session: 5, Votes: votes(v(0), v(0), v(1))}, "two votes by s0"},
		{"duplicate among q others", wire.ResetCertificate{Client: c, Session: 5, Votes: votes(v(0), v(1), v(2), v(1))}, "two votes by s1"},
		{"duplicate with another reason", wire.ResetCertificate{Client: c, Session: 5, Votes: votes(v(0), v(1), f.vote(t, 1, c, 5, wire.SuspectDoorway))}, "two votes by s1"},
		{"vote on another client", wire.ResetCertificate{Client: c, Session: 5, Votes: votes(v(0), v(1), f.vote(t, 2, id(f.bob), 5, wire.SuspectMute))}, "holds a vote on"},
		{"vote on another session", wire.ResetCertificate{Client: c, Session: 5, Votes: votes(v(0), v(1), f.vote(t, 2, c, 4, wire.SuspectMute))}, "holds a vote on"},
		{"vote on a later session", wire.ResetCertificate{Client: c, Session: 5, Votes: votes(v(0), v(1), f.vote(t, 2, c, 6, wire.SuspectMute))}, "holds a vote on"},
		{"fewer than q", wire.ResetCertificate{Client: c, Session: 5, Votes: votes(v(0), v(1))}, "needs 3"},
		{"no votes", wire.ResetCertificate{Client: c, Session: 5}, "needs 3"},
		{"forged vote", wire.ResetCertificate{Client: c, Session: 5, Votes: votes(v(0), v(1), forged)}, "bad signature"},
		{"vote signed by an outsider", wire.ResetCertificate{Client: c, Session: 5, Votes: votes(v(0), v(1), outsider)}, "bad signature"},
		{"vote by an unknown server", wire.ResetCertificate{Client: c, Session: 5, Votes: votes(v(0), v(1), unknown)}, "unknown server"},
		{"certificate re-labelled for another client", wire.ResetCertificate{Client: id(f.bob), Session: 5, Votes: votes(v(0), v(1), v(2))}, "holds a vote on"},
		{"certificate re-labelled for another session", wire.ResetCertificate{Client: c, Session: 6, Votes: votes(v(0), v(1), v(2))}, "holds a vote on"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireInvalid(t, tc.cert.Verify(f.keys, f.q), tc.contains)
		})
	}
}

func TestClientIDAndDigestCBOR(t *testing.T) {
	f := fx(t)
	a := id(f.alice)
	b, err := crypto.Marshal(a)
	require.NoError(t, err)
	require.Equal(t, append([]byte{0x58, 0x20}, a[:]...), b)
	var back wire.ClientID
	require.NoError(t, crypto.UnmarshalCanonical(b, &back))
	require.Equal(t, a, back)

	d := wire.Digest(a)
	b, err = crypto.Marshal(d)
	require.NoError(t, err)
	require.Equal(t, append([]byte{0x58, 0x20}, d[:]...), b)
	var dback wire.Digest
	require.NoError(t, crypto.UnmarshalCanonical(b, &dback))
	require.Equal(t, d, dback)

	bstr := func(n int) []byte {
		h, err := crypto.Marshal(bytes.Repeat([]byte{0xab}, n))
		require.NoError(t, err)
		return h
	}
	bad := map[string][]byte{
		"0 bytes":              bstr(0),
		"1 byte":               bstr(1),
		"31 bytes":             bstr(31),
		"33 bytes":             bstr(33),
		"64 bytes":             bstr(64),
		"text of 32 chars":     append([]byte{0x78, 0x20}, bytes.Repeat([]byte{'a'}, 32)...),
		"integer":              {0x01},
		"null":                 {0xf6},
		"indefinite 32 bytes":  append(append([]byte{0x5f, 0x58, 0x20}, bytes.Repeat([]byte{1}, 32)...), 0xff),
		"truncated":            append([]byte{0x58, 0x20}, bytes.Repeat([]byte{1}, 31)...),
		"trailing byte":        append(append([]byte{0x58, 0x20}, bytes.Repeat([]byte{1}, 32)...), 0),
		"array of 31 integers": append([]byte{0x98, 0x1f}, bytes.Repeat([]byte{1}, 31)...),
		"tagged 32 bytes":      append([]byte{0xd8, 0x40, 0x58, 0x20}, bytes.Repeat([]byte{1}, 32)...),
	}
	for name, in := range bad {
		var c wire.ClientID
		require.Error(t, c.UnmarshalCBOR(in), "ClientID: %s", name)
		require.Error(t, crypto.Unmarshal(in, &c), "ClientID via Unmarshal: %s", name)
		var d wire.Digest
		require.Error(t, d.UnmarshalCBOR(in), "Digest: %s", name)
		require.Error(t, crypto.Unmarshal(in, &d), "Digest via Unmarshal: %s", name)
	}
	// Inside a frame, too.
	_, err = wire.Decode(unhex(t, "a1 03 a1 01 58 1f"+strings.Repeat("00", 31)))
	require.ErrorContains(t, err, "client id has 31 bytes")
	_, err = wire.Decode(unhex(t, "a1 03 a1 01 58 21"+strings.Repeat("00", 33)))
	require.ErrorContains(t, err, "client id has 33 bytes")
}

func TestClientIDHelpers(t *testing.T) {
	f := fx(t)
	a := id(f.alice)
	require.Equal(t, wire.ClientID(f.alice.Public.Wire.Fingerprint()), wire.ClientIDOf(f.alice.Public.Wire))
	require.Equal(t, "c"+a.Hex()[:8], a.String())
	require.Len(t, a.Hex(), 64)
	var lo, hi wire.ClientID
	hi[31] = 1
	require.True(t, lo.Less(hi))
	require.False(t, hi.Less(lo))
	require.False(t, lo.Less(lo))
	hi2 := wire.ClientID{0: 1}
	require.True(t, hi.Less(hi2), "the first byte decides")
	require.Equal(t, "s7", wire.ServerID(7).String())
}

// H(J) covers the views' exact bytes in order (docs/protocol.md §2, §3.2).
func TestJustificationHash(t *testing.T) {
	f := fx(t)
	j := f.justification(t, f.alice, 3, 2)
	h := wire.JustificationHash(j)
	require.Equal(t, h, wire.JustificationHash(f.justification(t, f.alice, 3, 2)), "deterministic")
	ticket, _ := f.aliceTicket(t)
	st, err := ticket.Verify(testCluster())
	require.NoError(t, err)
	require.Equal(t, h, *st.JHash)

	seen := map[wire.Digest]string{h: "original"}
	distinct := func(name string, jj []wire.SignedView) {
		t.Helper()
		hh := wire.JustificationHash(jj)
		prev, dup := seen[hh]
		require.False(t, dup, "%s hashes like %s", name, prev)
		seen[hh] = name
	}
	for i := range j {
		replaced := append([]wire.SignedView(nil), j...)
		replaced[i] = f.view(t, 3, f.alice, 3, 2)
		distinct("view "+string(rune('0'+i))+" replaced", replaced)

		sigFlip := append([]wire.SignedView(nil), j...)
		sigFlip[i].Signed.Sig = bytes.Clone(j[i].Signed.Sig)
		sigFlip[i].Signed.Sig[0] ^= 1
		distinct("view "+string(rune('0'+i))+" sig flipped", sigFlip)

		bodyFlip := append([]wire.SignedView(nil), j...)
		bodyFlip[i].Signed.Body = bytes.Clone(j[i].Signed.Body)
		bodyFlip[i].Signed.Body[len(bodyFlip[i].Signed.Body)-1] ^= 1
		distinct("view "+string(rune('0'+i))+" body flipped", bodyFlip)

		relabelled := append([]wire.SignedView(nil), j...)
		relabelled[i].Server += 10
		distinct("view "+string(rune('0'+i))+" relabelled", relabelled)
	}
	distinct("swapped 0,1", []wire.SignedView{j[1], j[0], j[2]})
	distinct("swapped 1,2", []wire.SignedView{j[0], j[2], j[1]})
	distinct("rotated", []wire.SignedView{j[1], j[2], j[0]})
	distinct("last dropped", j[:2])
	distinct("one repeated", []wire.SignedView{j[0], j[1], j[2], j[2]})
	distinct("empty", nil)
}

func TestStatementHash(t *testing.T) {
	f := fx(t)
	s, _ := f.aliceTicket(t)
	h := s.Hash()
	require.Equal(t, h, s.Hash())
	c := s
	c.Signed.Sig = bytes.Clone(s.Signed.Sig)
	c.Signed.Sig[3] ^= 1
	require.NotEqual(t, h, c.Hash())
	c = s
	c.Key = f.bob.Public.Wire
	require.NotEqual(t, h, c.Hash())
	c = s
	c.Signed.Body = append(bytes.Clone(s.Signed.Body), 0)
	require.NotEqual(t, h, c.Hash())
}
