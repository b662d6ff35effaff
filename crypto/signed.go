package crypto

import (
	"errors"
	"fmt"
)

// Signed is a signed object: deterministic CBOR Body bytes and a signature
// over the domain prefix and those bytes. The signer is named by the enclosing
// message (a client key, or a server id looked up in the cluster file).
type Signed struct {
	_    struct{} `cbor:",toarray"`
	Body []byte
	Sig  []byte
}

// ErrBadSignature is returned when a signature does not verify.
var ErrBadSignature = errors.New("crypto: bad signature")

// Seal encodes body deterministically and signs it under domain.
func Seal(k *PrivateKey, domain Domain, body any) (Signed, error) {
	b, err := Marshal(body)
	if err != nil {
		return Signed{}, err
	}
	return Signed{Body: b, Sig: k.Sign(domain, b)}, nil
}

// Open verifies s under pub and domain first, and only then strictly decodes
// its Body (which must be canonical) into out.
func Open(pub *Parsed, domain Domain, s Signed, out any) error {
	if pub == nil {
		return errors.New("crypto: no key to verify with")
	}
	if !pub.Verify(domain, s.Body, s.Sig) {
		return fmt.Errorf("%w (%s)", ErrBadSignature, domain)
	}
	return UnmarshalCanonical(s.Body, out)
}
