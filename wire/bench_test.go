package wire_test

import (
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

func BenchmarkEncode(b *testing.B) {
	for _, e := range examples(b) {
		b.Run(e.name, func(b *testing.B) {
			enc, err := wire.Encode(e.msg)
			require.NoError(b, err)
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				if _, err := wire.Encode(e.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, e := range examples(b) {
		b.Run(e.name, func(b *testing.B) {
			enc, err := wire.Encode(e.msg)
			require.NoError(b, err)
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				if _, err := wire.Decode(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSignedStatementVerify measures one statement check: key parse,
// signature, strict canonical decode and the phase rules (docs/protocol.md §10:
// server CPU per SET-TICKET is a handful of these).
func BenchmarkSignedStatementVerify(b *testing.B) {
	f := fx(b)
	for _, k := range []*crypto.PrivateKey{f.alice, f.pq, f.hybrid} {
		b.Run(k.Scheme(), func(b *testing.B) {
			s := f.stmt(b, k, wire.PhaseTicket, 3, 2, 7, digest("J"))
			b.ReportAllocs()
			b.SetBytes(int64(len(s.Signed.Body)))
			for b.Loop() {
				if _, err := s.Verify(testCluster()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSignedViewVerify(b *testing.B) {
	f := fx(b)
	v := f.view(b, 1, f.alice, 3, 2)
	b.ReportAllocs()
	b.SetBytes(int64(len(v.Signed.Body)))
	for b.Loop() {
		if _, err := v.Verify(f.keys); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResetCertificateVerify(b *testing.B) {
	f := fx(b)
	c := f.reset(b, id(f.carol), 5, 0, 1, 2)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Verify(f.keys, f.q); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJustificationHash(b *testing.B) {
	f := fx(b)
	j := f.justification(b, f.alice, 3, 2)
	b.ReportAllocs()
	for b.Loop() {
		wire.JustificationHash(j)
	}
}

func BenchmarkSignedStatementHash(b *testing.B) {
	type (
		Statement = wire.Statement
		ClientID  = wire.ClientID
		Digest    = wire.Digest
	)
	const PhaseTicket = wire.PhaseTicket
	SignStatement := wire.SignStatement
	k, err := crypto.PrivateKeyFromSeed(crypto.Ed25519, make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	d := Digest{1}
	ss, err := SignStatement(k, testCluster(), &Statement{Lock: "L", Client: ClientID(k.Public.ID), Session: 1, Attempt: 1, Phase: PhaseTicket, N: 3, JHash: &d})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = ss.Hash()
	}
}

// BenchmarkMembersReply is a SET-TICKET answer at k = 64 contenders: the one
// message whose size grows with k (docs/performance.md).
func BenchmarkMembersReply(b *testing.B) {
	k, err := crypto.PrivateKeyFromSeed(crypto.Ed25519, make([]byte, 32))
	require.NoError(b, err)
	reply := &wire.MembersReply{Req: 9, Lock: "ci/deploy"}
	for i := range 64 {
		d := wire.Digest{byte(i)}
		ss, err := wire.SignStatement(k, testCluster(), &wire.Statement{Lock: "ci/deploy", Client: wire.ClientID(k.Public.ID), Session: 1, Attempt: uint64(i + 1), Phase: wire.PhaseTicket, N: uint64(i + 1), JHash: &d})
		require.NoError(b, err)
		reply.Members = append(reply.Members, ss)
	}
	m := &wire.Message{MembersReply: reply}
	enc, err := wire.Encode(m)
	require.NoError(b, err)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := wire.Encode(m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := wire.Decode(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
