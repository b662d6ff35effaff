package quorum

import "github.com/bq-lock/bq/wire"

// Timestamp orders a client's statements: (session, attempt, phase), compared
// lexicographically (docs/protocol.md §2).
type Timestamp struct {
	Session uint64
	Attempt uint64
	Phase   wire.Phase
}

// TimestampOf returns the timestamp of a statement.
func TimestampOf(s *wire.Statement) Timestamp {
	return Timestamp{Session: s.Session, Attempt: s.Attempt, Phase: s.Phase}
}

// Compare returns -1, 0 or +1 as t is before, equal to or after o.
func (t Timestamp) Compare(o Timestamp) int {
	switch {
	case t.Session != o.Session:
		return cmpU64(t.Session, o.Session)
	case t.Attempt != o.Attempt:
		return cmpU64(t.Attempt, o.Attempt)
	default:
		return cmpU64(uint64(t.Phase), uint64(o.Phase))
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RegisterValue is one server's verified answer to a register read: the
// highest statement it holds (nil if none) and the highest session it knows
// to be reset (0 if none) — each already verified by the caller.
type RegisterValue struct {
	Statement *wire.Statement
	ResetUpTo uint64
}

// Void reports whether a statement is voided by a reset of sessions ≤ resetUpTo.
func Void(s *wire.Statement, resetUpTo uint64) bool {
	return s != nil && resetUpTo > 0 && s.Session <= resetUpTo
}

// ReadRegister applies the read rule of docs/protocol.md §2 to the verified
// answers of q distinct servers: the highest valid statement that no answer
// shows to be void. It returns nil when the register holds nothing (or only
// void values).
func ReadRegister(values []RegisterValue) *wire.Statement {
	var resetUpTo uint64
	for _, v := range values {
		resetUpTo = max(resetUpTo, v.ResetUpTo)
	}
	var best *wire.Statement
	for _, v := range values {
		s := v.Statement
		if s == nil || Void(s, resetUpTo) {
			continue
		}
		if best == nil || TimestampOf(s).Compare(TimestampOf(best)) > 0 {
			best = s
		}
	}
	return best
}
