package wire

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bq-lock/bq/crypto"
)

// Admission and revocation (docs/protocol.md change 23): a closed cluster's
// client CA signs an AdmissionBody for every client it enrolls, and a
// RevocationBody for every client it throws out.

// Bounds on what a certificate may carry.
const (
	MaxClientName   = 64      // bytes of an AdmissionBody's Name
	MaxLockPatterns = 64      // patterns of one AdmissionBody
	MaxAdmission    = 8 << 10 // bytes of a signed certificate (body and signature)
)

// AdmissionBody is what the client CA certifies about one client key.
type AdmissionBody struct {
	Cluster ClusterID `cbor:"1,keyasint"`
	Serial  uint64    `cbor:"2,keyasint"`
	Name    string    `cbor:"3,keyasint"`
	Client  ClientID  `cbor:"4,keyasint"`
	// Locks are the lock-name patterns the client may use (LockPatternMatch);
	// none means every name.
	Locks []string `cbor:"5,keyasint,omitempty"`
	// MaxHoldMillis is the longest the client may hold a lock; 0: the
	// cluster's default.
	MaxHoldMillis uint64 `cbor:"6,keyasint,omitempty"`
	// The certificate is valid from NotBefore to NotAfter (Unix milliseconds).
	NotBefore int64 `cbor:"7,keyasint"`
	NotAfter  int64 `cbor:"8,keyasint"`
}

// RevocationBody is the client CA's word that Client is no longer admitted.
type RevocationBody struct {
	Cluster ClusterID `cbor:"1,keyasint"`
	Client  ClientID  `cbor:"2,keyasint"`
	Name    string    `cbor:"3,keyasint"`
	At      int64     `cbor:"4,keyasint"` // Unix milliseconds, for the operator's records
}

// Revoke carries a signed revocation: from the operator's command to a
// server (answered with an Ack of Req), and from server to server.
type Revoke struct {
	Req        uint64        `cbor:"1,keyasint,omitempty"`
	Revocation crypto.Signed `cbor:"2,keyasint"`
}

func (r *Revoke) String() string { return fmt.Sprintf("Revoke(req=%d)", r.Req) }

// SignAdmission signs b with the client CA key, for cluster.
func SignAdmission(ca *crypto.PrivateKey, cluster ClusterID, b *AdmissionBody) (crypto.Signed, error) {
	b.Cluster = cluster
	if err := b.check(); err != nil {
		return crypto.Signed{}, err
	}
	return crypto.Seal(ca, crypto.DomainAdmission, b)
}

// VerifyAdmission checks an admission certificate's signature under the
// client CA key, its cluster and its contents (not its validity window:
// ValidAt). It returns the certified body.
func VerifyAdmission(ca *crypto.Parsed, cluster ClusterID, s crypto.Signed) (*AdmissionBody, error) {
	if len(s.Body)+len(s.Sig) > MaxAdmission {
		return nil, invalid("admission certificate of %d bytes (the limit is %d)", len(s.Body)+len(s.Sig), MaxAdmission)
	}
	var b AdmissionBody
	if err := crypto.Open(ca, crypto.DomainAdmission, s, &b); err != nil {
		if errors.Is(err, crypto.ErrBadSignature) {
			return nil, invalid("the admission certificate is not signed by this cluster's client CA")
		}
		return nil, invalid("admission certificate: %v", err)
	}
	if err := checkCluster("admission certificate", b.Cluster, cluster); err != nil {
		return nil, err
	}
	if err := b.check(); err != nil {
		return nil, err
	}
	return &b, nil
}

func (b *AdmissionBody) check() error {
	if b.Name == "" || len(b.Name) > MaxClientName || !utf8.ValidString(b.Name) {
		return invalid("admission certificate: a client name is 1..%d bytes of UTF-8", MaxClientName)
	}
	if len(b.Locks) > MaxLockPatterns {
		return invalid("admission certificate: %d lock patterns (at most %d)", len(b.Locks), MaxLockPatterns)
	}
	for _, p := range b.Locks {
		if err := CheckLockPattern(p); err != nil {
			return err
		}
	}
	if b.NotAfter <= b.NotBefore {
		return invalid("admission certificate: it ends before it starts")
	}
	return nil
}

// ValidAt reports whether the certificate's window covers now.
func (b *AdmissionBody) ValidAt(now time.Time) error {
	ms := now.UnixMilli()
	switch {
	case ms < b.NotBefore:
		return fmt.Errorf("the admission certificate of %q is valid only from %s", b.Name, time.UnixMilli(b.NotBefore).UTC().Format(time.RFC3339))
	case ms >= b.NotAfter:
		return fmt.Errorf("the admission certificate of %q expired at %s", b.Name, time.UnixMilli(b.NotAfter).UTC().Format(time.RFC3339))
	}
	return nil
}

// Allows reports whether the certificate lets its client use lock.
func (b *AdmissionBody) Allows(lock string) bool {
	if b == nil || len(b.Locks) == 0 {
		return true
	}
	for _, p := range b.Locks {
		if LockPatternMatch(p, lock) {
			return true
		}
	}
	return false
}

// Refusal says why the certificate does not let its client use lock, in a
// user's words ("" when it does): `identity "ci" may lock only names
// matching "ci/*", "build/*"; "prod/deploy" is none of them`.
func (b *AdmissionBody) Refusal(lock string) string {
	if b.Allows(lock) {
		return ""
	}
	quoted := make([]string, len(b.Locks))
	for i, p := range b.Locks {
		quoted[i] = fmt.Sprintf("%q", p)
	}
	return fmt.Sprintf("identity %q may lock only names matching %s; %q is none of them", b.Name, strings.Join(quoted, ", "), lock)
}

// Patterns is the certificate's lock patterns for a message: "every name"
// when it has none.
func (b *AdmissionBody) Patterns() string {
	if b == nil || len(b.Locks) == 0 {
		return "every name"
	}
	return strings.Join(b.Locks, ", ")
}

// SignRevocation signs r with the client CA key, for cluster.
func SignRevocation(ca *crypto.PrivateKey, cluster ClusterID, r *RevocationBody) (crypto.Signed, error) {
	r.Cluster = cluster
	return crypto.Seal(ca, crypto.DomainRevocation, r)
}

// VerifyRevocation checks a revocation's signature under the client CA key
// and its cluster, and returns its body.
func VerifyRevocation(ca *crypto.Parsed, cluster ClusterID, s crypto.Signed) (*RevocationBody, error) {
	if len(s.Body)+len(s.Sig) > MaxAdmission {
		return nil, invalid("revocation of %d bytes (the limit is %d)", len(s.Body)+len(s.Sig), MaxAdmission)
	}
	var r RevocationBody
	if err := crypto.Open(ca, crypto.DomainRevocation, s, &r); err != nil {
		return nil, invalid("revocation: %v", err)
	}
	if err := checkCluster("revocation", r.Cluster, cluster); err != nil {
		return nil, err
	}
	if len(r.Name) > MaxClientName {
		return nil, invalid("revocation: a client name of %d bytes", len(r.Name))
	}
	return &r, nil
}

// CheckLockPattern reports whether p is a valid lock-name pattern: 1..MaxLockName
// bytes of UTF-8.
func CheckLockPattern(p string) error {
	if p == "" || len(p) > MaxLockName || !utf8.ValidString(p) {
		return invalid("lock pattern %q: a pattern is 1..%d bytes of UTF-8", p, MaxLockName)
	}
	return nil
}

// LockPatternMatch reports whether the whole of name matches pattern: `*`
// matches any run of characters other than '/', `**` any run at all, `?`
// one character other than '/'; every other character matches itself. It
// is memoized, so its cost is at most len(pattern)·len(name) steps whatever
// the name (names come from clients).
func LockPatternMatch(pattern, name string) bool {
	// The common patterns need no matcher: a plain name, and a plain
	// prefix followed by "**".
	switch i := strings.IndexAny(pattern, "*?"); {
	case i < 0:
		return pattern == name
	case i == len(pattern)-2 && strings.HasSuffix(pattern, "**"):
		return strings.HasPrefix(name, pattern[:i])
	}
	m := matcher{p: pattern, s: name, memo: make([]int8, (len(pattern)+1)*(len(name)+1))}
	return m.at(0, 0)
}

type matcher struct {
	p, s string
	memo []int8 // 0 unknown, 1 match, 2 no match; index i*(len(s)+1)+j
}

// at reports whether p[i:] matches s[j:].
func (m *matcher) at(i, j int) bool {
	k := i*(len(m.s)+1) + j
	if m.memo[k] != 0 {
		return m.memo[k] == 1
	}
	ok := m.step(i, j)
	m.memo[k] = 2
	if ok {
		m.memo[k] = 1
	}
	return ok
}

func (m *matcher) step(i, j int) bool {
	p, s := m.p, m.s
	if i == len(p) {
		return j == len(s)
	}
	switch {
	case strings.HasPrefix(p[i:], "**"):
		// Skip the stars; then try every suffix, '/' included.
		next := i
		for next < len(p) && p[next] == '*' {
			next++
		}
		return m.at(next, j) || (j < len(s) && m.at(i, j+1))
	case p[i] == '*':
		return m.at(i+1, j) || (j < len(s) && s[j] != '/' && m.at(i, j+1))
	case p[i] == '?':
		r, n := utf8.DecodeRuneInString(s[j:])
		return n > 0 && r != '/' && m.at(i+1, j+n)
	default:
		return j < len(s) && p[i] == s[j] && m.at(i+1, j+1)
	}
}

// VerifyAdmissionAny verifies an admission certificate signed by any of the
// client CAs cas (change 43: a client-CA rotation lists the old and the new
// until every client is renewed).
func VerifyAdmissionAny(cas []*crypto.Parsed, cluster ClusterID, s crypto.Signed) (*AdmissionBody, error) {
	var first error
	for _, ca := range cas {
		b, err := VerifyAdmission(ca, cluster, s)
		if err == nil {
			return b, nil
		}
		if first == nil || strings.Contains(first.Error(), "not signed by") {
			first = err // the most telling: a malformed certificate, another cluster's
		}
	}
	if first == nil {
		return nil, invalid("this cluster has no client CA")
	}
	return nil, first
}

// VerifyRevocationAny verifies a revocation signed by any of the client CAs cas.
func VerifyRevocationAny(cas []*crypto.Parsed, cluster ClusterID, s crypto.Signed) (*RevocationBody, error) {
	var first error
	for _, ca := range cas {
		r, err := VerifyRevocation(ca, cluster, s)
		if err == nil {
			return r, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		return nil, invalid("this cluster has no client CA")
	}
	return nil, first
}
