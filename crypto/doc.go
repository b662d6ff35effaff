// Package crypto is bq's signature layer and its strict CBOR codec.
//
// Everything a third party must verify (client statements, server views,
// suspicion votes, reset certificates, evidence; docs/protocol.md §1) is a signed
// object {Body, Sig}: Body is deterministic CBOR, and the signature covers a
// domain-separation prefix followed by the exact Body bytes. Callers must
// verify first and decode after (Open does both, in that order).
//
// Schemes come from circl's sign.Scheme: Ed25519 (default), ML-DSA-44, and the
// Ed25519+Dilithium2 hybrid. Every public key on the wire names its scheme.
// Ed25519 signatures are checked by curve25519-voi under circl's rule, with
// the same verdict on every input (ed25519verify.go; two verifiers that
// disagree would let a Byzantine client split correct servers).
//
// Decoding is strict everywhere: size caps, bounded lengths and nesting, no
// duplicate map keys, no indefinite lengths, no tags, no unknown fields and no
// trailing bytes (see Unmarshal).
package crypto
