package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/bq-lock/bq/crypto"
)

// ServerID is a server's index in the cluster file, 0..n-1.
type ServerID uint16

func (s ServerID) String() string { return fmt.Sprintf("s%d", uint16(s)) }

// ClientID is SHA-256 of a client's scheme-tagged public key (docs/protocol.md §1).
type ClientID [32]byte

// ClientIDOf returns the ClientID of a public key.
func ClientIDOf(k crypto.PublicKey) ClientID { return ClientID(k.Fingerprint()) }

// ObserverID is the id an observer connection of client parent is bound to
// (docs/protocol.md change 32): SHA-256 over a domain tag, parent and the
// server's Hello nonce, so each observer connection has an id of its own
// that no key hashes to (a key's id is the hash of a scheme-tagged key, never
// of this tag) and that never displaces parent's own connection.
func ObserverID(parent ClientID, nonce []byte) ClientID {
	h := sha256.New()
	h.Write([]byte("bq/v1/observer\x00"))
	h.Write(parent[:])
	h.Write(nonce)
	return ClientID(h.Sum(nil))
}

// String is the short form used in logs and traces: "c" + 8 hex digits.
func (c ClientID) String() string { return "c" + hex.EncodeToString(c[:4]) }

// Hex is the full hexadecimal form.
func (c ClientID) Hex() string { return hex.EncodeToString(c[:]) }

// Less orders clients by id; the bakery breaks ticket ties with it.
func (c ClientID) Less(o ClientID) bool {
	for i := range c {
		if c[i] != o[i] {
			return c[i] < o[i]
		}
	}
	return false
}

// MarshalCBOR encodes the id as a 32-byte string.
func (c ClientID) MarshalCBOR() ([]byte, error) { return marshalFixed(c[:]), nil }

// UnmarshalCBOR accepts exactly a 32-byte string.
func (c *ClientID) UnmarshalCBOR(b []byte) error { return unmarshalFixed(b, c[:], "client id") }

// ClusterID names one cluster (see ClusterIDOf). Every signed body carries
// it, so nothing signed for one cluster verifies in another.
type ClusterID [32]byte

// String is the short form used in logs and errors: 8 hex digits.
func (c ClusterID) String() string { return hex.EncodeToString(c[:4]) }

// Hex is the full hexadecimal form.
func (c ClusterID) Hex() string { return hex.EncodeToString(c[:]) }

// MarshalCBOR encodes the id as a 32-byte string.
func (c ClusterID) MarshalCBOR() ([]byte, error) { return marshalFixed(c[:]), nil }

// UnmarshalCBOR accepts exactly a 32-byte string.
func (c *ClusterID) UnmarshalCBOR(b []byte) error { return unmarshalFixed(b, c[:], "cluster id") }

// Digest is a SHA-256 hash (of a justification, of a signed object).
type Digest [32]byte

func (d Digest) String() string { return hex.EncodeToString(d[:4]) }

// MarshalCBOR encodes the digest as a 32-byte string.
func (d Digest) MarshalCBOR() ([]byte, error) { return marshalFixed(d[:]), nil }

// UnmarshalCBOR accepts exactly a 32-byte string.
func (d *Digest) UnmarshalCBOR(b []byte) error { return unmarshalFixed(b, d[:], "digest") }

// marshalFixed encodes a 24..255-byte value as a CBOR byte string (major
// type 2, one length byte): what cbor.Marshal would write, in one allocation.
func marshalFixed(b []byte) []byte {
	out := make([]byte, 2+len(b))
	out[0], out[1] = 0x58, byte(len(b))
	copy(out[2:], b)
	return out
}

func unmarshalFixed(b []byte, dst []byte, what string) error {
	var raw []byte
	if err := crypto.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw) != len(dst) {
		return fmt.Errorf("wire: %s has %d bytes, want %d", what, len(raw), len(dst))
	}
	copy(dst, raw)
	return nil
}
