package wire_test

import (
	"bytes"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// Fuzz targets for every decoder and verifier of the package.
// The property of each: no panic, and whatever is accepted is consistent.
// Seeds are the generator's examples, so the fuzzer starts from valid frames.

func FuzzDecode(f *testing.F) {
	for _, e := range examples(f) {
		b, err := wire.Encode(e.msg)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{0xa1, 0x0a, 0xa0})
	f.Add([]byte{0xa2, 0x05, 0xa0, 0x0a, 0xa0})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := wire.Decode(data)
		if err != nil {
			require.Nil(t, m)
			return
		}
		checkDecoded(t, data, m)
	})
}

// statementSigners are the keys a statement fuzz input can pick.
func statementSigners(f *fixture) []*crypto.PrivateKey {
	return []*crypto.PrivateKey{f.alice, f.bob, f.pq, f.hybrid}
}

// checkStatement is what Verify promises about a statement it returns (docs/protocol.md §2).
func checkStatement(t testing.TB, s *wire.SignedStatement, st *wire.Statement) {
	t.Helper()
	require.Equal(t, wire.ClientIDOf(s.Key), st.Client)
	require.NoError(t, wire.CheckLockName(st.Lock))
	require.Less(t, st.N, wire.TicketCap)
	switch st.Phase {
	case wire.PhaseDoorway, wire.PhaseExit:
		require.Zero(t, st.N)
		require.Nil(t, st.JHash)
	case wire.PhaseTicket:
		require.NotZero(t, st.N)
		require.NotNil(t, st.JHash)
	case wire.PhaseHeld:
		require.NotZero(t, st.N)
		require.Nil(t, st.JHash)
	default:
		t.Fatalf("Verify accepted phase %d", st.Phase)
	}
	canon, err := crypto.Marshal(st)
	require.NoError(t, err)
	require.Equal(t, s.Signed.Body, canon, "Verify accepted a non-canonical body")
	require.NotContains(t, st.String(), "\n")
}

// FuzzSignedStatementVerify fuzzes the body and signature of a statement.
// With resign set, the body is signed for real first, so the fuzzer reaches
// the decoder and the consistency checks behind the signature.
func FuzzSignedStatementVerify(f *testing.F) {
	fix := fx(f)
	ticket, _ := fix.aliceTicket(f)
	for _, s := range []wire.SignedStatement{
		fix.stmt(f, fix.alice, wire.PhaseDoorway, 1, 1, 0, nil),
		ticket,
		fix.stmt(f, fix.alice, wire.PhaseHeld, 3, 2, 7, nil),
		fix.stmt(f, fix.alice, wire.PhaseExit, 3, 2, 0, nil),
	} {
		f.Add(uint8(0), s.Signed.Body, s.Signed.Sig, false)
		f.Add(uint8(0), s.Signed.Body, []byte(nil), true)
	}
	pq := fix.stmt(f, fix.pq, wire.PhaseDoorway, 1, 1, 0, nil)
	f.Add(uint8(2), pq.Signed.Body, pq.Signed.Sig, false)
	f.Fuzz(func(t *testing.T, which uint8, body, sig []byte, resign bool) {
		signers := statementSigners(fix)
		k := signers[int(which)%len(signers)]
		if resign {
			sig = k.Sign(crypto.DomainStatement, body)
		}
		s := wire.SignedStatement{Key: k.Public.Wire, Signed: crypto.Signed{Body: body, Sig: sig}}
		_ = s.Hash()
		st, err := s.Verify(testCluster())
		if err != nil {
			require.ErrorIs(t, err, wire.ErrInvalid)
			require.Nil(t, st)
			return
		}
		checkStatement(t, &s, st)
		require.Equal(t, id(k), st.Client)
	})
}

func FuzzSignedViewVerify(f *testing.F) {
	fix := fx(f)
	for s := 0; s < fix.n; s++ {
		v := fix.view(f, s, fix.alice, 3, 2)
		f.Add(uint16(v.Server), v.Signed.Body, v.Signed.Sig, false)
		f.Add(uint16(v.Server), v.Signed.Body, []byte(nil), true)
	}
	f.Add(uint16(9), []byte{0xa0}, []byte{}, true)
	f.Fuzz(func(t *testing.T, server uint16, body, sig []byte, resign bool) {
		if resign && int(server) < fix.n {
			sig = fix.servers[server].Sign(crypto.DomainView, body)
		}
		v := wire.SignedView{Server: wire.ServerID(server), Signed: crypto.Signed{Body: body, Sig: sig}}
		_ = wire.JustificationHash([]wire.SignedView{v})
		vb, err := v.Verify(fix.keys)
		if err != nil {
			require.ErrorIs(t, err, wire.ErrInvalid)
			require.Nil(t, vb)
			return
		}
		require.Less(t, int(server), fix.n)
		require.Equal(t, v.Server, vb.Server)
		require.NoError(t, wire.CheckLockName(vb.Lock))
		canon, err := crypto.Marshal(vb)
		require.NoError(t, err)
		require.Equal(t, body, canon, "Verify accepted a non-canonical view")
		require.NotContains(t, vb.String(), "\n")
		// The statements inside are not verified by the view; verifying them never panics.
		for i := range vb.Members {
			if st, err := vb.Members[i].Verify(testCluster()); err == nil {
				checkStatement(t, &vb.Members[i], st)
			}
		}
		if vb.HW != nil {
			if st, err := vb.HW.Verify(testCluster()); err == nil {
				checkStatement(t, vb.HW, st)
			}
		}
	})
}

func FuzzSignedSuspectVerify(f *testing.F) {
	fix := fx(f)
	for s := 0; s < fix.n; s++ {
		v := fix.vote(f, s, id(fix.carol), 4, wire.SuspectMute)
		f.Add(uint16(v.Server), v.Signed.Body, v.Signed.Sig, false)
		f.Add(uint16(v.Server), v.Signed.Body, []byte(nil), true)
	}
	f.Fuzz(func(t *testing.T, server uint16, body, sig []byte, resign bool) {
		if resign && int(server) < fix.n {
			sig = fix.servers[server].Sign(crypto.DomainSuspect, body)
		}
		v := wire.SignedSuspect{Server: wire.ServerID(server), Signed: crypto.Signed{Body: body, Sig: sig}}
		sb, err := v.Verify(fix.keys)
		if err != nil {
			require.ErrorIs(t, err, wire.ErrInvalid)
			require.Nil(t, sb)
			return
		}
		require.Less(t, int(server), fix.n)
		require.Equal(t, v.Server, sb.Server)
		canon, err := crypto.Marshal(sb)
		require.NoError(t, err)
		require.Equal(t, body, canon, "Verify accepted a non-canonical vote")
		require.NotContains(t, sb.String(), "\n")
	})
}

// voteTable holds pre-signed votes, indexed by voteKey, so the certificate
// fuzzer can build certificates fast.
type voteKey struct {
	server     int // 0..n-1 are cluster servers; n, n+1 name unknown servers (signed by an outsider)
	otherCli   bool
	otherSess  bool
	reasonBit  bool
	corruptSig bool
}

// FuzzResetCertificateVerify checks Verify two ways: on arbitrary bytes
// decoded as a certificate (no panic; acceptance implies the §5 rule), and on
// certificates assembled from real votes described by spec, against a naive
// reference of the rule.
func FuzzResetCertificateVerify(f *testing.F) {
	fix := fx(f)
	c, sess := id(fix.carol), uint64(5)
	table := map[voteKey]wire.SignedSuspect{}
	for s := 0; s < fix.n+2; s++ {
		for _, oc := range []bool{false, true} {
			for _, os := range []bool{false, true} {
				for _, rb := range []bool{false, true} {
					cli, ss, why := c, sess, wire.SuspectMute
					if oc {
						cli = id(fix.bob)
					}
					if os {
						ss = sess + 1
					}
					if rb {
						why = wire.SuspectDoorway
					}
					signer := fix.outsider
					if s < fix.n {
						signer = fix.servers[s]
					}
					v, err := wire.SignSuspect(signer, testCluster(), &wire.SuspectBody{Client: cli, Session: ss, Server: wire.ServerID(s), Reason: why})
					require.NoError(f, err)
					table[voteKey{s, oc, os, rb, false}] = v
					bad := v
					bad.Signed.Sig = bytes.Clone(v.Signed.Sig)
					bad.Signed.Sig[7] ^= 0x10
					table[voteKey{s, oc, os, rb, true}] = bad
				}
			}
		}
	}
	good, err := crypto.Marshal(fix.reset(f, c, sess, 0, 1, 2))
	require.NoError(f, err)
	f.Add(good, []byte{0, 1, 2})
	f.Add(good, []byte{0, 0, 1})
	f.Add([]byte{0xa0}, []byte{0, 1, 2, 3, 4, 5, 8, 16, 32, 64})
	f.Fuzz(func(t *testing.T, data, spec []byte) {
		var raw wire.ResetCertificate
		if crypto.Unmarshal(data, &raw) == nil {
			if raw.Verify(fix.keys, fix.q) == nil {
				servers := map[wire.ServerID]bool{}
				for i := range raw.Votes {
					b, err := raw.Votes[i].Verify(fix.keys)
					require.NoError(t, err)
					require.Equal(t, raw.Client, b.Client)
					require.Equal(t, raw.Session, b.Session)
					servers[b.Server] = true
				}
				require.GreaterOrEqual(t, len(servers), fix.q)
				require.Len(t, servers, len(raw.Votes), "a duplicate vote was accepted")
			}
		}

		if len(spec) > 2*fix.n+2 {
			spec = spec[:2*fix.n+2]
		}
		cert := wire.ResetCertificate{Client: c, Session: sess}
		valid, seen := true, map[int]bool{}
		for _, b := range spec {
			k := voteKey{
				server: int(b&7) % (fix.n + 2), otherCli: b&8 != 0, otherSess: b&16 != 0,
				reasonBit: b&32 != 0, corruptSig: b&64 != 0,
			}
			cert.Votes = append(cert.Votes, table[k])
			if k.server >= fix.n || k.otherCli || k.otherSess || k.corruptSig || seen[k.server] {
				valid = false
			}
			seen[k.server] = true
		}
		if len(seen) < fix.q {
			valid = false
		}
		err := cert.Verify(fix.keys, fix.q)
		require.Equal(t, valid, err == nil, "spec %x: model says %t, Verify says %v", spec, valid, err)
	})
}

func FuzzClientIDUnmarshalCBOR(f *testing.F) {
	fix := fx(f)
	b, err := crypto.Marshal(id(fix.alice))
	require.NoError(f, err)
	f.Add(b)
	f.Add(append([]byte{0x58, 0x1f}, make([]byte, 31)...))
	f.Add(append([]byte{0x98, 0x20}, make([]byte, 32)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c wire.ClientID
		err := c.UnmarshalCBOR(data)
		var c2 wire.ClientID
		err2 := crypto.Unmarshal(data, &c2)
		require.Equal(t, err == nil, err2 == nil, "UnmarshalCBOR: %v; Unmarshal: %v", err, err2)
		if err != nil {
			return
		}
		require.Equal(t, c, c2)
		again, err := crypto.Marshal(c)
		require.NoError(t, err)
		var c3 wire.ClientID
		require.NoError(t, crypto.UnmarshalCanonical(again, &c3))
		require.Equal(t, c, c3)
	})
}

func FuzzDigestUnmarshalCBOR(f *testing.F) {
	fix := fx(f)
	ticket, _ := fix.aliceTicket(f)
	b, err := crypto.Marshal(ticket.Hash())
	require.NoError(f, err)
	f.Add(b)
	f.Add(append([]byte{0x58, 0x21}, make([]byte, 33)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		var d wire.Digest
		err := d.UnmarshalCBOR(data)
		var d2 wire.Digest
		err2 := crypto.Unmarshal(data, &d2)
		require.Equal(t, err == nil, err2 == nil, "UnmarshalCBOR: %v; Unmarshal: %v", err, err2)
		if err != nil {
			return
		}
		require.Equal(t, d, d2)
		again, err := crypto.Marshal(d)
		require.NoError(t, err)
		var d3 wire.Digest
		require.NoError(t, crypto.UnmarshalCanonical(again, &d3))
		require.Equal(t, d, d3)
	})
}
