package certs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Session numbers (docs/protocol.md §2, §5): every session a client opens must be
// above every session its key opened before, in this process or any earlier
// one, or a correct client could sign two statements with one timestamp
// (equivocation, §6) or be refused as stale. They come from a counter kept
// next to the identity file, IDENTITY.session, that grows by one and is
// fsynced before each number is used — never from a clock, so a clock
// stepped back changes nothing. The file is a cache: a process started
// without it (a key copied to another machine, or mounted from a secret)
// learns from the servers' refusals how far its numbering has gone and
// skips past it (SkipPast, change 67).
//
// A session number is counter<<SessionRandBits | r, r random: numbers from
// one counter grow strictly, and two machines that run one identity from
// copies of the same counter (a misuse bq cannot see) still almost never
// pick the same number, so they are never taken for one equivocating client.

// SessionRandBits is how many low bits of a session number are random.
const SessionRandBits = 20

// sessionCounterStart is the first counter of an identity without a counter
// file: 2^31, so its sessions start at 2^51, above every session of the
// wall-clock numbering (microseconds since 1970) that bq used before the
// counter, until the year 2041.
const sessionCounterStart = uint64(1) << 31

// maxSessionCounter keeps counter<<SessionRandBits within 64 bits.
const maxSessionCounter = uint64(1)<<(64-SessionRandBits) - 1

// ErrIdentityInUse is returned by OpenSessionCounter when the identity is
// open already, in another process of this machine or in this one (an
// *InUseError says which): one identity is one client with one session at a
// time (docs/protocol.md §5), so a second process must use its own, and a
// second client of one process must share the first.
var ErrIdentityInUse = errors.New("certs: identity in use")

// InUseError is the ErrIdentityInUse of OpenSessionCounter: the counter at
// Path is locked, by this process (ThisProcess: a SessionCounter of it is
// open) or by another one.
type InUseError struct {
	Path        string
	ThisProcess bool
}

func (e *InUseError) Error() string {
	if e.ThisProcess {
		return fmt.Sprintf("certs: identity in use: %s is open in this process already", e.Path)
	}
	return fmt.Sprintf("certs: identity in use: %s is locked by another process of this machine (give each process its own identity)", e.Path)
}

// Is makes an InUseError an ErrIdentityInUse.
func (e *InUseError) Is(target error) bool { return target == ErrIdentityInUse }

// openCounters are the counters open in this process, with their files'
// identities, so that a lock refused to a second open of one of them is
// told apart from another process's (a lock file cannot say who holds it).
// Held across an open, so that two opens in one process never take each
// other for another process.
var openCounters struct {
	sync.Mutex
	files map[*SessionCounter]os.FileInfo
}

// SessionCounter hands out an identity's session numbers. While open it holds
// an exclusive lock on its file, so no other process of this machine uses
// the identity.
// INVARIANT: counter is the value on disk, and every number handed out has a
// counter ≤ it.
type SessionCounter struct {
	path    string
	f       *os.File
	counter uint64
	rand    io.Reader
}

// SessionFileOf is where the counter of the identity at identityPath lives.
func SessionFileOf(identityPath string) string { return identityPath + ".session" }

// OpenSessionCounter opens (creating it if missing, mode 0600) the session
// counter at path and locks it. It fails with ErrIdentityInUse (an
// *InUseError) if another process holds it, or another SessionCounter of
// this one, and with an error naming the file if it is damaged.
func OpenSessionCounter(path string, rand io.Reader) (*SessionCounter, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("certs: making the directory for %s: %w", path, err)
	}
	openCounters.Lock()
	defer openCounters.Unlock()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("certs: opening the session counter %s: %w", path, err)
	}
	fi, statErr := f.Stat()
	if locked, err := TryLockFile(f); !locked {
		_ = f.Close()
		if err == nil {
			here := false
			for _, o := range openCounters.files {
				here = here || (statErr == nil && os.SameFile(o, fi))
			}
			return nil, &InUseError{Path: path, ThisProcess: here}
		}
		return nil, fmt.Errorf("certs: locking the session counter %s: %w", path, err)
	}
	s := &SessionCounter{path: path, f: f, rand: rand}
	buf := make([]byte, counterRecordSize+1)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		_ = s.closeFile()
		return nil, fmt.Errorf("certs: reading the session counter %s: %w", path, err)
	}
	switch {
	case n == 0:
		// A new counter: make the file's name durable too.
		s.counter = sessionCounterStart - 1
		if err := s.persist(s.counter); err != nil {
			_ = s.closeFile()
			return nil, err
		}
		if d, err := os.Open(filepath.Dir(path)); err == nil {
			_ = d.Sync()
			_ = d.Close()
		}
	default:
		c, err := parseCounter(buf[:n])
		if err != nil {
			_ = s.closeFile()
			return nil, fmt.Errorf("certs: the session counter %s is damaged (%v); it must never go back, so bq will not guess: "+
				"remove it only if this identity never opened a session with its present contents, or make a new identity", path, err)
		}
		s.counter = c
	}
	if statErr == nil {
		if openCounters.files == nil {
			openCounters.files = make(map[*SessionCounter]os.FileInfo)
		}
		openCounters.files[s] = fi
	}
	return s, nil
}

// NextSession persists counter+1 and returns a session number made of it.
func (s *SessionCounter) NextSession() (uint64, error) {
	if s.f == nil {
		return 0, fmt.Errorf("certs: the session counter %s is closed", s.path)
	}
	if s.counter >= maxSessionCounter {
		return 0, fmt.Errorf("certs: the session counter %s is exhausted", s.path)
	}
	var r [4]byte
	if _, err := io.ReadFull(s.rand, r[:]); err != nil {
		return 0, fmt.Errorf("certs: reading randomness for a session number: %w", err)
	}
	next := s.counter + 1
	if err := s.persist(next); err != nil {
		return 0, err
	}
	s.counter = next
	return next<<SessionRandBits | uint64(binary.BigEndian.Uint32(r[:]))&(1<<SessionRandBits-1), nil
}

// SkipPast makes every session handed out from now on above n, a number
// this identity used before (docs/protocol.md change 67: the servers showed
// it, to a process started without this file, or with an older copy): the
// counter moves to n's, persisted, so NextSession's next is above n.
func (s *SessionCounter) SkipPast(n uint64) error {
	if s.f == nil {
		return fmt.Errorf("certs: the session counter %s is closed", s.path)
	}
	c := n >> SessionRandBits
	if c <= s.counter {
		return nil
	}
	if c >= maxSessionCounter {
		return fmt.Errorf("certs: the session counter %s cannot go past session %d", s.path, n)
	}
	if err := s.persist(c); err != nil {
		return err
	}
	s.counter = c
	return nil
}

// Close releases the lock; the counter stays on disk.
func (s *SessionCounter) Close() error {
	openCounters.Lock()
	delete(openCounters.files, s)
	openCounters.Unlock()
	return s.closeFile()
}

// closeFile releases the lock and closes the file.
func (s *SessionCounter) closeFile() error {
	if s.f == nil {
		return nil
	}
	_ = UnlockFile(s.f)
	err := s.f.Close()
	s.f = nil
	return err
}

// The file holds one fixed-size record, rewritten in place (the lock is on
// the file itself, so it must not be replaced by a rename):
// "bq-session v1 " + 20 decimal digits + " " + 8 hex digits of its CRC-32C + "\n".
const (
	counterPrefix     = "bq-session v1 "
	counterRecordSize = len(counterPrefix) + 20 + 1 + 8 + 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func formatCounter(c uint64) []byte {
	digits := fmt.Sprintf("%020d", c)
	return fmt.Appendf(nil, "%s%s %08x\n", counterPrefix, digits, crc32.Checksum([]byte(digits), castagnoli))
}

func parseCounter(b []byte) (uint64, error) {
	if len(b) != counterRecordSize {
		return 0, fmt.Errorf("%d bytes, want %d", len(b), counterRecordSize)
	}
	line, ok := strings.CutPrefix(string(b), counterPrefix)
	if !ok || !strings.HasSuffix(line, "\n") {
		return 0, errors.New("not a session counter")
	}
	digits, sum, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	if !ok || len(digits) != 20 || len(sum) != 8 {
		return 0, errors.New("not a session counter")
	}
	want, err := strconv.ParseUint(sum, 16, 32)
	if err != nil || uint32(want) != crc32.Checksum([]byte(digits), castagnoli) {
		return 0, errors.New("checksum mismatch")
	}
	c, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || c > maxSessionCounter {
		return 0, fmt.Errorf("counter %q out of range", digits)
	}
	return c, nil
}

func (s *SessionCounter) persist(c uint64) error {
	if _, err := s.f.WriteAt(formatCounter(c), 0); err != nil {
		return fmt.Errorf("certs: writing the session counter %s: %w", s.path, err)
	}
	if err := s.f.Truncate(int64(counterRecordSize)); err != nil {
		return fmt.Errorf("certs: writing the session counter %s: %w", s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("certs: syncing the session counter %s: %w", s.path, err)
	}
	return nil
}
