package activeset

import (
	"bytes"
	"sort"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Entry is a verified statement as a server holds it.
// INVARIANT: St is the verified decoding of Signed. No reset certificate
// the server knows covers St.Session: a certificate collects the entries it
// voids (ForgetUpTo; docs/protocol.md change 22).
type Entry struct {
	Signed wire.SignedStatement
	St     *wire.Statement
}

// Size is about what the entry takes in memory and on disk: its signed
// body, signature and key, and a fixed overhead (docs/protocol.md change
// 25: the live state a server bounds).
func (e *Entry) Size() int {
	return len(e.Signed.Signed.Body) + len(e.Signed.Signed.Sig) + len(e.Signed.Key.Key) + entryOverhead
}

// entryOverhead is what an entry costs besides its bytes: the decoded
// statement, the map slot, the disk record's key.
const entryOverhead = 160

// Active reports whether the entry makes its client a member.
func (e *Entry) Active() bool {
	if e == nil {
		return false
	}
	switch e.St.Phase {
	case wire.PhaseDoorway, wire.PhaseTicket, wire.PhaseHeld:
		return true
	}
	return false
}

// Outcome is what applying a statement did.
type Outcome uint8

// The outcomes of Apply.
const (
	// Accepted: the statement is newer than the client's previous one and is now its register value.
	Accepted Outcome = iota + 1
	// Duplicate: the same statement was already the register value.
	Duplicate
	// Stale: a newer statement of the client is already held (a late or forwarded copy).
	Stale
	// Equivocation: a different statement with the same timestamp is held.
	Equivocation
)

func (o Outcome) String() string {
	return [...]string{"?", "accepted", "duplicate", "stale", "equivocation"}[o]
}

// Lock is one server's state for one lock.
//
// INVARIANT: highest[c] is the statement of c with the greatest timestamp
// ever applied; hw is the Ticket with the greatest N ever applied (ties: the
// first); seq counts the changes to highest (and so to the active set).
type Lock struct {
	Name    string
	highest map[wire.ClientID]*Entry
	hw      *Entry
	seq     uint64
	subs    map[subKey]*Subscription
	// bytes is the Size of every register value (highest).
	// INVARIANT: kept by Apply, Restore, ForgetUpTo and Forget, the only
	// writers of highest.
	bytes int
}

// NewLock makes an empty lock.
func NewLock(name string) *Lock {
	return &Lock{Name: name, highest: make(map[wire.ClientID]*Entry), subs: make(map[subKey]*Subscription)}
}

// Apply makes e the register value of its client if it is newer (§2).
// On Equivocation, the held entry is returned as the other half of the proof.
func (l *Lock) Apply(e *Entry) (Outcome, *Entry) {
	c := e.St.Client
	prev := l.highest[c]
	if prev != nil {
		switch quorum.TimestampOf(e.St).Compare(quorum.TimestampOf(prev.St)) {
		case -1:
			return Stale, prev
		case 0:
			if bytes.Equal(prev.Signed.Signed.Body, e.Signed.Signed.Body) {
				return Duplicate, prev
			}
			return Equivocation, prev
		}
	}
	l.highest[c] = e
	l.seq++
	l.bytes += e.Size()
	if prev != nil {
		l.bytes -= prev.Size()
	}
	if e.St.Phase == wire.PhaseTicket && (l.hw == nil || e.St.N > l.hw.St.N) {
		l.hw = e
	}
	return Accepted, prev
}

// Restore puts back an entry read from disk (no listeners exist yet).
func (l *Lock) Restore(e *Entry) {
	if prev := l.highest[e.St.Client]; prev != nil {
		l.bytes -= prev.Size()
	}
	l.highest[e.St.Client] = e
	l.bytes += e.Size()
	l.seq++
}

// Entries returns every register value, members or not (read only).
func (l *Lock) Entries() []*Entry {
	out := make([]*Entry, 0, len(l.highest))
	for _, e := range l.highest {
		out = append(out, e)
	}
	return out
}

// Bytes is the Size of every register value of the lock.
func (l *Lock) Bytes() int { return l.bytes }

// RestoreHW puts back the persisted high-water mark.
func (l *Lock) RestoreHW(e *Entry) { l.hw = e }

// ForgetUpTo drops c's register value if its session is ≤ upTo, the
// session a reset certificate ends: every statement of such a session is
// refused from then on, so the value can never matter again and is
// collected (docs/protocol.md change 22). It reports whether a value was
// dropped and whether that removed c from the active set.
func (l *Lock) ForgetUpTo(c wire.ClientID, upTo uint64) (forgotten, wasMember bool) {
	e := l.highest[c]
	if e == nil || e.St.Session > upTo {
		return false, false
	}
	delete(l.highest, c)
	l.bytes -= e.Size()
	l.seq++
	return true, e.Active()
}

// Highest returns c's register value, or nil.
func (l *Lock) Highest(c wire.ClientID) *Entry { return l.highest[c] }

// HW returns the highest Ticket ever applied, or nil.
func (l *Lock) HW() *Entry { return l.hw }

// Seq is the lock's change counter.
func (l *Lock) Seq() uint64 { return l.seq }

// IsMember reports whether c is in the active set.
func (l *Lock) IsMember(c wire.ClientID) bool { return l.highest[c].Active() }

// Members returns the active set's entries ordered by client id.
func (l *Lock) Members() []*Entry {
	out := make([]*Entry, 0, len(l.highest))
	for _, e := range l.highest {
		if e.Active() {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].St.Client.Less(out[j].St.Client) })
	return out
}

// HighestNumbered is the member with the highest ticket N (ties: the
// lowest ClientID), or nil when no member has a ticket: the one member
// statement a View needs (docs/protocol.md change 16).
func (l *Lock) HighestNumbered() *Entry {
	var best *Entry
	for _, e := range l.highest {
		if !e.Active() || e.St.N == 0 {
			continue
		}
		if best == nil || e.St.N > best.St.N || (e.St.N == best.St.N && e.St.Client.Less(best.St.Client)) {
			best = e
		}
	}
	return best
}

// LeastNumbered is the member whose Ticket or Held has the least ticket
// (N, ClientID), or nil when no member has one: the member this server's
// view lets enter first (docs/protocol.md change 24, max-hold).
func (l *Lock) LeastNumbered() *Entry {
	var best *Entry
	for _, e := range l.highest {
		if !e.Active() || e.St.N == 0 {
			continue
		}
		if best == nil || e.St.N < best.St.N || (e.St.N == best.St.N && e.St.Client.Less(best.St.Client)) {
			best = e
		}
	}
	return best
}

// MemberCount is the size of the active set.
func (l *Lock) MemberCount() int {
	n := 0
	for _, e := range l.highest {
		if e.Active() {
			n++
		}
	}
	return n
}

// Clients is the number of clients with a register value here (members or not).
func (l *Lock) Clients() int { return len(l.highest) }

// Forget drops c's register value (a banned client).
func (l *Lock) Forget(c wire.ClientID) bool {
	e, ok := l.highest[c]
	if !ok {
		return false
	}
	delete(l.highest, c)
	l.bytes -= e.Size()
	l.seq++
	return e.Active()
}

// Signed returns the signed statements of entries.
func Signed(es []*Entry) []wire.SignedStatement {
	out := make([]wire.SignedStatement, len(es))
	for i, e := range es {
		out[i] = e.Signed
	}
	return out
}

// EncodeEntry is the stored form of an entry.
func EncodeEntry(e *Entry) ([]byte, error) { return crypto.Marshal(e.Signed) }
