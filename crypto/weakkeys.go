package crypto

import (
	"bytes"
	"encoding/hex"
	"errors"
)

// Ed25519 public keys that no honest key generator produces and under which
// a signature can verify without the private key: points of small order
// (for them circl accepts R = identity, S = 0 on any message) and encodings
// that are not canonical (y ≥ p, or x = 0 with the sign bit set). A client
// choosing such a key could let anyone sign "its" statements; we refuse the
// key outright so no two servers can ever disagree about such a signature.
var smallOrderEd25519 = func() [][]byte {
	var out [][]byte
	for _, h := range []string{
		"0100000000000000000000000000000000000000000000000000000000000000", // identity (order 1)
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // order 2
		"0000000000000000000000000000000000000000000000000000000000000000", // order 4
		"0000000000000000000000000000000000000000000000000000000000000080", // order 4
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", // order 8
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa", // order 8
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", // order 8
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85", // order 8
	} {
		b, err := hex.DecodeString(h)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	return out
}()

var errWeakKey = errors.New("crypto: Ed25519 public key is of small order or not canonical")

// checkEd25519Key refuses small-order and non-canonically encoded keys.
func checkEd25519Key(k []byte) error {
	if len(k) != 32 {
		return errWeakKey
	}
	for _, w := range smallOrderEd25519 {
		if bytes.Equal(k, w) {
			return errWeakKey
		}
	}
	// y (the low 255 bits) must be below p = 2^255 − 19.
	y := make([]byte, 32)
	copy(y, k)
	y[31] &= 0x7f
	if y[31] == 0x7f && y[0] >= 0xed && bytes.Equal(y[1:31], bytes.Repeat([]byte{0xff}, 30)) {
		return errWeakKey
	}
	// y = 1 (x = 0) with the sign bit set is a second encoding of the identity.
	if k[31]&0x80 != 0 && k[0] == 1 && bytes.Equal(y[1:], make([]byte, 31)) {
		return errWeakKey
	}
	return nil
}
