package crypto

import (
	"errors"
	"unicode/utf8"

	"github.com/bq-lock/bq/crypto/cborx"
)

// Signed and PublicKey are decoded by hand: every statement, View and vote
// carries one of each, and a SET-TICKET answer at 64 contenders carries 64
// of each, so the library's reflection was most of a frame's decoding.
// Both accept only the byte and text strings (and the null of a nil slice)
// that Marshal writes; they are
// never looser than the library (crypto/codec_hand_test.go checks that
// against it, on generated values and arbitrary bytes).

// UnmarshalCBOR decodes [body, sig], two byte strings, into one allocation.
func (s *Signed) UnmarshalCBOR(b []byte) error {
	r := cborx.Reader{B: b}
	if err := r.ArrayOf("a signed object", 2); err != nil {
		return err
	}
	body, err := r.BytesOrNull("a signed body")
	if err != nil {
		return err
	}
	sig, err := r.BytesOrNull("a signature")
	if err != nil {
		return err
	}
	if err := r.End("a signed object"); err != nil {
		return err
	}
	buf := make([]byte, len(body)+len(sig))
	copy(buf, body)
	copy(buf[len(body):], sig)
	s.Body, s.Sig = nilOr(body, buf[:len(body):len(body)]), nilOr(sig, buf[len(body):])
	return nil
}

// UnmarshalCBOR decodes [scheme, key], a text and a byte string.
func (k *PublicKey) UnmarshalCBOR(b []byte) error {
	r := cborx.Reader{B: b}
	if err := r.ArrayOf("a public key", 2); err != nil {
		return err
	}
	scheme, err := r.String("a key's scheme", cborx.Text)
	if err != nil {
		return err
	}
	if !utf8.Valid(scheme) {
		return errors.New("cbor: a key's scheme is not UTF-8")
	}
	key, err := r.BytesOrNull("a key")
	if err != nil {
		return err
	}
	if err := r.End("a public key"); err != nil {
		return err
	}
	k.Scheme, k.Key = string(scheme), nilOr(key, append([]byte{}, key...))
	return nil
}

// nilOr is nil for a null (read as nil), else the copy.
func nilOr(read, copied []byte) []byte {
	if read == nil {
		return nil
	}
	return copied
}

// appendPublicKey appends the deterministic encoding of k: Marshal's.
func appendPublicKey(dst []byte, k PublicKey) []byte {
	dst = cborx.AppendHead(dst, cborx.Array, 2)
	dst = cborx.AppendHead(dst, cborx.Text, uint64(len(k.Scheme)))
	dst = append(dst, k.Scheme...)
	if k.Key == nil {
		return append(dst, cborx.Null)
	}
	dst = cborx.AppendHead(dst, cborx.Bytes, uint64(len(k.Key)))
	return append(dst, k.Key...)
}
