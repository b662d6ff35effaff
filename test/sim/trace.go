package sim

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"time"
)

// tracer records one line per event. Every line goes into a
// running SHA-256, so two runs are the same run iff their hashes match; the
// last lines are kept for violation reports, and all of them go to Full if set.
type tracer struct {
	h     hash.Hash
	ring  []string
	next  int
	lines int
	full  io.Writer
}

const traceTail = 60

func newTracer(full io.Writer) *tracer {
	return &tracer{h: sha256.New(), ring: make([]string, 0, traceTail), full: full}
}

func (t *tracer) add(at time.Duration, format string, args ...any) {
	line := fmt.Sprintf("%10.6f ", at.Seconds()) + fmt.Sprintf(format, args...)
	t.h.Write([]byte(line))
	t.h.Write([]byte{'\n'})
	t.lines++
	if t.full != nil {
		fmt.Fprintln(t.full, line)
	}
	if len(t.ring) < traceTail {
		t.ring = append(t.ring, line)
		return
	}
	t.ring[t.next] = line
	t.next = (t.next + 1) % traceTail
}

// tail returns the last lines, oldest first.
func (t *tracer) tail() []string {
	out := make([]string, 0, len(t.ring))
	out = append(out, t.ring[t.next:]...)
	return append(out, t.ring[:t.next]...)
}

func (t *tracer) sum() [32]byte {
	var s [32]byte
	copy(s[:], t.h.Sum(nil))
	return s
}
