package wire

import "github.com/bq-lock/bq/crypto"

// Preverifier checks, ahead of a server's core, the signatures of what the
// core verifies in full on arrival: the statement of a Submit or a Forward
// (under the key it carries) and the Views of its J (under Keys, the
// keyring of the epoch the server serves; its own Views, which the core
// knows by their bytes, are skipped). No body is decoded and nothing is
// decided. A server's transport calls Check in each connection's read
// loop, so that these checks, the costliest part of taking a statement in,
// run on all cores in parallel instead of one after another on the core's
// goroutine; the verdicts land in crypto's verdict memo, where the core's
// own checks find them (docs/protocol.md §1, "one rule"). Checking or not
// never changes what the core decides, only where the time goes: a wrong or
// stale keyring costs checks the core does not reuse, nothing else. Safe
// for concurrent use; immutable once made.
type Preverifier struct {
	Keys *Keyring // nil: statements only
	Self ServerID
}

// Check checks the signatures m brings that the core would.
func (p *Preverifier) Check(m *Message) {
	var (
		st *SignedStatement
		j  []SignedView
	)
	switch {
	case m.Submit != nil:
		st, j = &m.Submit.Statement, m.Submit.J
	case m.Forward != nil:
		st, j = &m.Forward.Statement, m.Forward.J
	default:
		return
	}
	if pub, err := st.Key.Parse(); err == nil {
		_ = pub.Verify(crypto.DomainStatement, st.Signed.Body, st.Signed.Sig)
	}
	if p.Keys == nil {
		return
	}
	for i := range j {
		v := &j[i]
		if v.Server == p.Self {
			continue
		}
		if pub := p.Keys.Key(v.Server); pub != nil {
			_ = pub.Verify(crypto.DomainView, v.Signed.Body, v.Signed.Sig)
		}
	}
}
