package bakery

import (
	"errors"
	"fmt"
	"sort"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// StatementVerifier verifies a signed statement (usually through a cache).
type StatementVerifier func(*wire.SignedStatement) (*wire.Statement, error)

// ViewVerifier checks a signed View and returns its body, like
// (*wire.SignedView).Verify; nil means exactly that. A server passes one
// that knows the Views it signed itself (server/core).
type ViewVerifier func(*wire.SignedView) (*wire.ViewBody, error)

// Attempt names one attempt of one client on one lock.
type Attempt struct {
	Lock    string
	Client  wire.ClientID
	Session uint64
	Attempt uint64
}

func (a Attempt) String() string {
	return fmt.Sprintf("%s %s sess=%d att=%d", a.Lock, a.Client, a.Session, a.Attempt)
}

// ErrBadJustification marks a justification that proves nothing: a Ticket
// carrying it is evidence against its signer (docs/protocol.md §6).
var ErrBadJustification = errors.New("bakery: invalid justification")

// ErrTicketCap marks a justification whose ticket would reach the cap 2^62
// (docs/protocol.md §8): a faulty server showed a colluding client's inflated
// statement. A client then tries other q-subsets of the Views it received.
var ErrTicketCap = errors.New("bakery: the ticket cap 2^62")

func badJ(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadJustification, fmt.Sprintf(format, args...))
}

// TicketFromJustification checks a justification J for attempt a and
// returns the ticket it justifies (docs/protocol.md §3.1–§3.2):
//
//	N = 1 + max(numbers of all member statements in J ∪ numbers of the hw statements in J)
//
// J must hold exactly q Views from q distinct servers, each validly signed,
// each for this lock and attempt. Member and hw statements that fail
// verification or belong to another lock are skipped: they cannot raise N
// (and a correct server's View holds none). Only the statements that could
// attain the max are verified, highest first. Client and server run this same
// function, so they always agree on N.
func TicketFromJustification(j []wire.SignedView, keys wire.Keyring, q int, a Attempt, verify StatementVerifier, views ViewVerifier) (uint64, error) {
	if views == nil {
		views = func(v *wire.SignedView) (*wire.ViewBody, error) { return v.Verify(keys) }
	}
	if e := wire.JustificationEpoch(j); len(j) > 0 && e != keys.Epoch {
		// Before anything else: another epoch has another q, and a J of
		// it convicts nobody (change 43; found growing 4 → 7 servers,
		// where a J of q_1 = 4 views met servers of q_3 = 5).
		return 0, fmt.Errorf("bakery: a justification of epoch %d, verified in epoch %d: %w", e, keys.Epoch, wire.ErrOtherEpoch)
	}
	if len(j) != q {
		return 0, badJ("has %d views, needs exactly %d", len(j), q)
	}
	seen := make(map[wire.ServerID]bool, q)
	// Candidates for the max, read from the statements' bodies before any
	// signature check. Only the highest valid one matters (§3.2: "verify the
	// signatures of the statements that attain the max; others cannot raise
	// it"), so they are tried from the highest N down and the first that
	// verifies ends the search; a statement with N = 0 never counts.
	type candidate struct {
		n  uint64
		ss *wire.SignedStatement
	}
	var cands []candidate
	consider := func(ss *wire.SignedStatement) {
		var peek wire.Statement
		if crypto.Unmarshal(ss.Signed.Body, &peek) == nil && peek.N > 0 {
			cands = append(cands, candidate{peek.N, ss})
		}
	}
	for i := range j {
		v, err := views(&j[i])
		if errors.Is(err, wire.ErrOtherEpoch) {
			// A J of another epoch is refused, and convicts nobody: a
			// correct client's attempt can straddle a change (change 43).
			return 0, fmt.Errorf("bakery: view %d of the justification: %w", i, err)
		}
		if err != nil {
			return 0, badJ("view %d: %v", i, err)
		}
		if seen[v.Server] {
			return 0, badJ("two views by %s", v.Server)
		}
		seen[v.Server] = true
		if v.Lock != a.Lock || v.For != a.Client || v.ForSession != a.Session || v.ForAttempt != a.Attempt {
			return 0, badJ("view by %s is for %s %s sess=%d att=%d, not %s", v.Server, v.Lock, v.For, v.ForSession, v.ForAttempt, a)
		}
		for k := range v.Members {
			consider(&v.Members[k])
		}
		if v.HW != nil {
			consider(v.HW)
		}
	}
	sort.SliceStable(cands, func(x, y int) bool { return cands[x].n > cands[y].n })
	var maxN uint64
	tried := make(map[string]bool, len(cands))
	for _, c := range cands {
		if tried[string(c.ss.Signed.Body)] {
			continue // the same statement in another View: it failed already
		}
		tried[string(c.ss.Signed.Body)] = true
		if st, err := verify(c.ss); err == nil && st.Lock == a.Lock {
			maxN = st.N
			break
		}
	}
	n := maxN + 1
	if n >= wire.TicketCap {
		return 0, fmt.Errorf("%w: ticket %d reaches it: the lock's tickets were inflated by a faulty client and server", ErrTicketCap, n)
	}
	return n, nil
}

// CheckTicket verifies that Ticket statement st is exactly justified by j
// (its N and its H(J)); it returns nil or an error wrapping ErrBadJustification.
func CheckTicket(st *wire.Statement, j []wire.SignedView, keys wire.Keyring, q int, verify StatementVerifier, views ViewVerifier) error {
	if st.Phase != wire.PhaseTicket || st.JHash == nil {
		return badJ("not a Ticket")
	}
	if h := wire.JustificationHash(j); h != *st.JHash {
		return badJ("J hashes to %s, the Ticket names %s", h, st.JHash)
	}
	a := Attempt{Lock: st.Lock, Client: st.Client, Session: st.Session, Attempt: st.Attempt}
	n, err := TicketFromJustification(j, keys, q, a, verify, views)
	if err != nil {
		return err
	}
	if st.N != n && !skipTicketRule() {
		return badJ("Ticket has N=%d, J justifies N=%d", st.N, n)
	}
	return nil
}
