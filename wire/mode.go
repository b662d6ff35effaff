package wire

import "fmt"

// Modes of a holding (docs/protocol.md change 60): what a waiter waits for
// depends on its own mode and each member's.
type Mode uint8

const (
	// ModeExclusive is a writer: it overlaps nobody. The default, absent on
	// the wire.
	ModeExclusive Mode = iota
	// ModeShared is a reader: it overlaps other readers only.
	ModeShared
	// ModePermits is one of Statement.Permits permits: at most that many
	// holders of the same count are in at once.
	ModePermits
)

// MaxPermits bounds a semaphore's permits.
const MaxPermits = 1024

func (m Mode) String() string {
	switch m {
	case ModeExclusive:
		return "exclusive"
	case ModeShared:
		return "shared"
	case ModePermits:
		return "permits"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Holding is a statement's mode and, for ModePermits, its permits.
type Holding struct {
	Mode    Mode
	Permits uint32
}

// HoldingOf is st's holding.
func HoldingOf(st *Statement) Holding { return Holding{Mode: st.Mode, Permits: st.Permits} }

// Compatible reports whether holders in modes h and o may be in at once:
// both shared, or both permits of the same count.
func (h Holding) Compatible(o Holding) bool {
	switch h.Mode {
	case ModeShared:
		return o.Mode == ModeShared
	case ModePermits:
		return o.Mode == ModePermits && o.Permits == h.Permits
	}
	return false
}

// Capacity is how many compatible members ahead may still be in when a
// waiter in mode h enters, plus one: 1 for exclusive (none), k for k
// permits; shared waiters never count (0 stands for no bound).
func (h Holding) Capacity() int {
	switch h.Mode {
	case ModeShared:
		return 0
	case ModePermits:
		return int(h.Permits)
	}
	return 1
}

func (h Holding) String() string {
	if h.Mode == ModePermits {
		return fmt.Sprintf("%d permits", h.Permits)
	}
	return h.Mode.String()
}

// Check says whether h is a valid holding to ask for.
func (h Holding) Check() error { return h.check(PhaseDoorway) }

// check says whether h is a valid holding for a statement of phase p.
func (h Holding) check(p Phase) error {
	switch {
	case p == PhaseExit && (h.Mode != ModeExclusive || h.Permits != 0):
		return fmt.Errorf("an Exit carries no mode")
	case h.Mode == ModeExclusive || h.Mode == ModeShared:
		if h.Permits != 0 {
			return fmt.Errorf("a %s statement carries permits", h.Mode)
		}
	case h.Mode == ModePermits:
		if h.Permits < 2 || h.Permits > MaxPermits {
			return fmt.Errorf("%d permits: want 2 to %d", h.Permits, MaxPermits)
		}
	default:
		return fmt.Errorf("unknown mode %d", h.Mode)
	}
	return nil
}
