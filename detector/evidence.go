package detector

import (
	"errors"
	"fmt"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// The malicious-behaviour detector (docs/protocol.md §6, the paper's §5.3).
//
// Per (client, lock) a server follows the automaton R → E1 (Doorway) → E2
// (Ticket) → C (Held) → R (Exit); Exit is legal from any state and a newer
// attempt's Doorway from any state (a lost Exit on a broken connection is
// implied by it). Those transitions are exactly what the register's
// timestamp order accepts, so the automaton is the register itself
// (activeset.Lock) plus the checks in core.accept; a message that only
// arrived early (a Held or Listen before its Ticket) is answered with a
// request to resend, never with a verdict.
//
// The automaton moves to byz only on what no correct client can produce, and
// only on transferable evidence, so that every correct server reaches the
// same verdict and no server can frame a correct client:
//
//   - EvidenceInvalidTicket: a Ticket signed by the client whose J hashes to
//     the Ticket's signed H(J) but does not justify its N (or is not a valid
//     justification at all: wrong views, replayed views of another attempt).
//     A Ticket whose J does not match its hash proves nothing — anybody can
//     pair a Ticket with garbage — and is only refused.
//   - EvidenceEquivocation: two different statements signed by the client
//     with the same (lock, session, attempt, phase).

// ErrNotEvidence is returned for evidence that proves nothing.
var ErrNotEvidence = errors.New("detector: not evidence of misbehaviour")

// CheckEvidence verifies ev and returns the client it convicts. keys and q
// are the cluster's; verify checks statements (usually through a cache).
func CheckEvidence(ev *wire.Evidence, keys wire.Keyring, q int, verify bakery.StatementVerifier) (wire.ClientID, error) {
	a, err := verify(&ev.A)
	if err != nil {
		return wire.ClientID{}, fmt.Errorf("%w: %v", ErrNotEvidence, err)
	}
	switch ev.Kind {
	case wire.EvidenceInvalidTicket:
		if a.Phase != wire.PhaseTicket || a.JHash == nil {
			return wire.ClientID{}, fmt.Errorf("%w: not a Ticket", ErrNotEvidence)
		}
		if wire.JustificationHash(ev.J) != *a.JHash {
			return wire.ClientID{}, fmt.Errorf("%w: J is not the justification the Ticket signed", ErrNotEvidence)
		}
		err := bakery.CheckTicket(a, ev.J, keys, q, verify, nil)
		if err == nil {
			return wire.ClientID{}, fmt.Errorf("%w: the Ticket is justified", ErrNotEvidence)
		}
		if !errors.Is(err, bakery.ErrBadJustification) {
			return wire.ClientID{}, fmt.Errorf("%w: %v", ErrNotEvidence, err)
		}
		return a.Client, nil
	case wire.EvidenceEquivocation:
		if ev.B == nil {
			return wire.ClientID{}, fmt.Errorf("%w: equivocation needs two statements", ErrNotEvidence)
		}
		b, err := verify(ev.B)
		if err != nil {
			return wire.ClientID{}, fmt.Errorf("%w: %v", ErrNotEvidence, err)
		}
		if a.Client != b.Client || a.Lock != b.Lock || quorum.TimestampOf(a) != quorum.TimestampOf(b) {
			return wire.ClientID{}, fmt.Errorf("%w: the statements do not share a signer, lock and timestamp", ErrNotEvidence)
		}
		if string(ev.A.Signed.Body) == string(ev.B.Signed.Body) {
			return wire.ClientID{}, fmt.Errorf("%w: the statements are the same", ErrNotEvidence)
		}
		return a.Client, nil
	}
	return wire.ClientID{}, fmt.Errorf("%w: unknown kind %d", ErrNotEvidence, ev.Kind)
}
