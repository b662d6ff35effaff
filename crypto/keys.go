package crypto

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cloudflare/circl/sign"
	"github.com/cloudflare/circl/sign/ed25519"
	"github.com/cloudflare/circl/sign/eddilithium2"
	"github.com/cloudflare/circl/sign/mldsa/mldsa44"
	voied "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// Scheme names, as they appear on the wire and in files.
const (
	Ed25519           = "Ed25519"
	MLDSA44           = "ML-DSA-44"
	Ed25519Dilithium2 = "Ed25519-Dilithium2"
	// DefaultScheme is what keys are made with unless configured otherwise.
	DefaultScheme = Ed25519
)

var schemes = map[string]sign.Scheme{
	Ed25519:           ed25519.Scheme(),
	MLDSA44:           mldsa44.Scheme(),
	Ed25519Dilithium2: eddilithium2.Scheme(),
}

// Schemes lists the supported scheme names, default first.
func Schemes() []string { return []string{Ed25519, MLDSA44, Ed25519Dilithium2} }

func schemeByName(name string) (sign.Scheme, error) {
	s, ok := schemes[name]
	if !ok {
		return nil, fmt.Errorf("crypto: unknown signature scheme %q (supported: %s)", name, strings.Join(Schemes(), ", "))
	}
	return s, nil
}

// CheckScheme reports whether name is a supported scheme.
func CheckScheme(name string) error { _, err := schemeByName(name); return err }

// PublicKey is a scheme-tagged public key. Its zero value is invalid.
// It is encoded on the wire as the CBOR array [scheme name, key bytes].
type PublicKey struct {
	_      struct{} `cbor:",toarray"`
	Scheme string
	Key    []byte
}

// Parsed is a verified-to-be-well-formed public key ready to verify signatures.
// INVARIANT: pk is the decoding of Wire.Key under Wire.Scheme, and ID = SHA-256(CBOR(Wire)).
type Parsed struct {
	Wire PublicKey
	ID   [32]byte
	pk   sign.PublicKey
	sch  sign.Scheme
	ed   *[32]byte // the key's bytes when Wire.Scheme is Ed25519 (a copy: Wire.Key may alias a buffer)
}

// Parse checks that k names a supported scheme and holds a well-formed key.
func (k PublicKey) Parse() (*Parsed, error) {
	sch, err := schemeByName(k.Scheme)
	if err != nil {
		return nil, err
	}
	if len(k.Key) != sch.PublicKeySize() {
		return nil, fmt.Errorf("crypto: %s public key has %d bytes, want %d", k.Scheme, len(k.Key), sch.PublicKeySize())
	}
	if k.Scheme == Ed25519 {
		if err := checkEd25519Key(k.Key); err != nil {
			return nil, err
		}
	}
	pk, err := sch.UnmarshalBinaryPublicKey(k.Key)
	if err != nil {
		return nil, fmt.Errorf("crypto: malformed %s public key: %w", k.Scheme, err)
	}
	return &Parsed{Wire: k, ID: k.Fingerprint(), pk: pk, sch: sch, ed: ed25519Bytes(k)}, nil
}

// Fingerprint is SHA-256 of the key's wire encoding (so keys of different
// schemes never share a fingerprint). A client's ClientID is its fingerprint.
func (k PublicKey) Fingerprint() [32]byte {
	var buf [128]byte
	return sha256.Sum256(appendPublicKey(buf[:0], k))
}

// String renders the key as "Scheme:base64url".
func (k PublicKey) String() string {
	return k.Scheme + ":" + base64.RawURLEncoding.EncodeToString(k.Key)
}

// ParsePublicKeyString parses the String form of a key.
func ParsePublicKeyString(s string) (*Parsed, error) {
	name, b64, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return nil, errors.New("crypto: public key must look like SCHEME:BASE64URL")
	}
	if strings.ContainsAny(b64, "\r\n") {
		return nil, errors.New("crypto: public key contains a line break")
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("crypto: public key: %w", err)
	}
	return PublicKey{Scheme: name, Key: raw}.Parse()
}

// Verify checks sig over domain||body: Ed25519 by curve25519-voi under circl's
// rule (ed25519verify.go), the other schemes by circl.
// A verdict reached before on the same bytes is remembered (verdicts.go).
func (p *Parsed) Verify(domain Domain, body, sig []byte) bool {
	if len(sig) != p.sch.SignatureSize() {
		return false
	}
	k := verdictKey(domain, p, body, sig)
	if v, ok := verdicts.get(k); ok {
		return v
	}
	v := p.verify(domain, body, sig)
	verdicts.put(k, v)
	return v
}

// verify decides sig with the scheme's verifier.
func (p *Parsed) verify(domain Domain, body, sig []byte) bool {
	if p.ed != nil {
		return verifyEd25519(p.ed, domain.message(body), sig)
	}
	return p.sch.Verify(p.pk, domain.message(body), sig, nil)
}

// PrivateKey is a signing key together with its public half.
type PrivateKey struct {
	Public *Parsed
	sk     sign.PrivateKey
	sch    sign.Scheme
	seed   []byte
	ed     voied.PrivateKey // the same key for curve25519-voi's signer when the scheme is Ed25519 (ed25519verify.go)
}

// GenerateKey makes a new key of the named scheme from rand's bytes.
func GenerateKey(scheme string, rand io.Reader) (*PrivateKey, error) {
	sch, err := schemeByName(scheme)
	if err != nil {
		return nil, err
	}
	seed := make([]byte, sch.SeedSize())
	if _, err := io.ReadFull(rand, seed); err != nil {
		return nil, fmt.Errorf("crypto: reading randomness: %w", err)
	}
	return keyFromSeed(scheme, sch, seed)
}

// PrivateKeyFromSeed rebuilds a key from its scheme and seed (the stored form).
func PrivateKeyFromSeed(scheme string, seed []byte) (*PrivateKey, error) {
	sch, err := schemeByName(scheme)
	if err != nil {
		return nil, err
	}
	if len(seed) != sch.SeedSize() {
		return nil, fmt.Errorf("crypto: %s seed has %d bytes, want %d", scheme, len(seed), sch.SeedSize())
	}
	return keyFromSeed(scheme, sch, seed)
}

func keyFromSeed(scheme string, sch sign.Scheme, seed []byte) (*PrivateKey, error) {
	pk, sk := sch.DeriveKey(seed)
	raw, err := pk.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("crypto: %w", err)
	}
	w := PublicKey{Scheme: scheme, Key: raw}
	k := &PrivateKey{
		Public: &Parsed{Wire: w, ID: w.Fingerprint(), pk: pk, sch: sch, ed: ed25519Bytes(w)},
		sk:     sk, sch: sch, seed: append([]byte(nil), seed...),
	}
	if scheme == Ed25519 {
		k.ed = voied.NewKeyFromSeed(seed)
	}
	return k, nil
}

// Scheme is the key's scheme name.
func (k *PrivateKey) Scheme() string { return k.Public.Wire.Scheme }

// Seed returns the seed the key derives from (its stored form). Keep it secret.
func (k *PrivateKey) Seed() []byte { return append([]byte(nil), k.seed...) }

// Sign signs domain||body. Ed25519 signatures are deterministic (RFC 8032):
// curve25519-voi's signer, twice as fast as circl's here, makes the very
// bytes circl's would (TestEd25519SignersAgree).
func (k *PrivateKey) Sign(domain Domain, body []byte) []byte {
	if k.ed != nil {
		return voied.Sign(k.ed, domain.message(body))
	}
	return k.sch.Sign(k.sk, domain.message(body), nil)
}

// Domain separates what a signature may be used for: a signature made for
// one domain never verifies in another.
type Domain string

// The signing domains of protocol version 1.
const (
	DomainStatement Domain = "bq/v1/statement"
	DomainView      Domain = "bq/v1/view"
	DomainSuspect   Domain = "bq/v1/suspect"
	DomainHello     Domain = "bq/v1/hello"
	// DomainAdmission and DomainRevocation are the client CA's (change 23).
	DomainAdmission  Domain = "bq/v1/admission"
	DomainRevocation Domain = "bq/v1/revocation"
	// DomainEpoch is the cluster CA's, on a configuration (docs/protocol.md
	// change 43).
	DomainEpoch Domain = "bq/v1/epoch"
	// DomainSession is a client's, on the TTL it opens a session with
	// (change 48).
	DomainSession Domain = "bq/v1/session"
	// DomainEndorsement is a member's, on the epoch after its own, and
	// DomainApproval a client CA's, on a proposed epoch (change 49).
	DomainEndorsement Domain = "bq/v1/endorsement"
	DomainApproval    Domain = "bq/v1/epoch-approval"
	// DomainProclamation is a leader's value (docs/protocol.md §11).
	DomainProclamation Domain = "bq/v1/proclamation"
	DomainTest         Domain = "bq/v1/test"
)

func (d Domain) message(body []byte) []byte {
	m := make([]byte, 0, len(d)+1+len(body))
	m = append(m, d...)
	m = append(m, 0) // domains are NUL-terminated, so no domain is a prefix of another's message
	return append(m, body...)
}
