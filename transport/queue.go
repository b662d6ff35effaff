package transport

import "sync"

// sendQueue is the bounded FIFO of encoded frames waiting for one peer.
// Producers (Send) never block; one consumer (a connection's writer) takes
// everything queued at once.
//
// INVARIANT: len(frames) <= maxLen, and bytes (the sum of len(frames[i])) <=
// maxBytes unless frames holds exactly one frame.
type sendQueue struct {
	maxLen, maxBytes int

	mu     sync.Mutex
	frames [][]byte
	bytes  int

	// wake holds a token whenever frames may be non-empty.
	wake chan struct{}
}

func newSendQueue(l Limits) *sendQueue {
	return &sendQueue{maxLen: l.QueueLen, maxBytes: l.QueueBytes, wake: make(chan struct{}, 1)}
}

// push appends f, or reports ErrQueueFull.
func (q *sendQueue) push(f []byte) error {
	q.mu.Lock()
	if len(q.frames) >= q.maxLen || (len(q.frames) > 0 && q.bytes+len(f) > q.maxBytes) {
		q.mu.Unlock()
		return ErrQueueFull
	}
	q.frames = append(q.frames, f)
	q.bytes += len(f)
	q.mu.Unlock()
	q.signal()
	return nil
}

func (q *sendQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take moves every queued frame to dst.
func (q *sendQueue) take(dst [][]byte) [][]byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	dst = append(dst, q.frames...)
	clear(q.frames)
	q.frames = q.frames[:0]
	q.bytes = 0
	return dst
}
