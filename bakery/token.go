package bakery

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/big"

	"github.com/bq-lock/bq/wire"
)

// Token is a fencing token (§7): holdings are ordered by Less, by N, then by
// a tie-break derived from N and the client id. Its text form is "N.T"
// (String) and its integer form N·2^64 + T (Integer): both order tokens as
// Less does.
type Token struct {
	N      uint64
	Client wire.ClientID
}

// String renders the token as "N.T", T the 16-hex-digit tie-break: comparing
// N as a number and then T as a string orders tokens exactly as Less does
// (but for a 64-bit collision of T, where Less falls back to client ids).
func (t Token) String() string { return fmt.Sprintf("%d.%016x", t.N, t.TieBreak()) }

// Integer renders the token as one decimal integer, N·2^64 + T (T the
// tie-break): comparing two as numbers orders them as Less does (but for a
// 64-bit collision of T). It fits in 127 bits: an unsigned 128-bit integer or
// a NUMERIC(39) column holds it.
func (t Token) Integer() string {
	v := new(big.Int).SetUint64(t.N)
	v.Lsh(v, 64)
	v.Or(v, new(big.Int).SetUint64(t.TieBreak()))
	return v.String()
}

// TieBreak orders tokens with equal N: the first 8 bytes of
// SHA-256(N ‖ ClientID). Every client computes the same total order, but
// unlike the bare ClientID it changes from ticket to ticket, so no identity
// wins every tie (docs/protocol.md §3.3, docs/protocol.md changes).
func (t Token) TieBreak() uint64 {
	var b [8 + 32]byte
	binary.BigEndian.PutUint64(b[:8], t.N)
	copy(b[8:], t.Client[:])
	h := sha256.Sum256(b[:])
	return binary.BigEndian.Uint64(h[:8])
}

// Less orders tokens (and bakery tickets): by N, then by TieBreak, then by
// client id. The bakery enters in this order and fencing tokens follow it.
func (t Token) Less(o Token) bool {
	if t.N != o.N {
		return t.N < o.N
	}
	if a, b := t.TieBreak(), o.TieBreak(); a != b {
		return a < b
	}
	return t.Client.Less(o.Client)
}
