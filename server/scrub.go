package server

import (
	"context"
	"time"
)

// scrubChunk is how many values one step of the scrub checks, in one read
// transaction of the store.
const scrubChunk = 256

// scrub reads the whole store over and over in the background, at most
// rate bytes of values a second (0: never), a pass starting at most once
// every interval, so that cold data that rots is found before a restart
// needs it (docs/protocol.md change 69, rule 6). A bad tag fails the store,
// and watchStore stops the server. It returns when ctx ends or the store
// fails.
func (s *Server) scrub(ctx context.Context, rate int, interval time.Duration) {
	if rate <= 0 {
		return
	}
	t := time.NewTimer(0)
	defer t.Stop()
	var last struct{ passes, bytes uint64 }
	passStart := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, err := s.store.Scrub(scrubChunk)
		if err != nil {
			return // failed (watchStore stops the server) or closed
		}
		s.metrics.ScrubBytes.Add(float64(p.Bytes - last.bytes))
		s.metrics.ScrubPasses.Add(float64(p.Passes - last.passes))
		s.metrics.ScrubChecked.Set(float64(p.Checked))
		// INVARIANT: the scrub reads at most rate bytes a second, on
		// average over each step, and waits at least a millisecond
		// between steps.
		pause := time.Duration(float64(p.Bytes-last.bytes) / float64(rate) * float64(time.Second))
		if p.Passes > last.passes { // a pass ended: the next starts interval after this one did
			pause = max(pause, time.Until(passStart.Add(interval)))
			passStart = time.Now().Add(pause)
		}
		last.passes, last.bytes = p.Passes, p.Bytes
		t.Reset(max(pause, time.Millisecond))
	}
}
