package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/bq-lock/bq/wire"
)

// A frame on a stream is a 4-byte big-endian length followed by that many
// bytes of one CBOR-encoded wire.Message (docs/protocol.md §1, §8).
const frameHeader = 4

// maxHandshakeFrame caps the frames of the Challenge/Hello/Welcome exchange:
// before a peer is authenticated it may not make us buffer more than this.
// The largest Hello (an Ed25519-Dilithium2 key and signature) is under 5 KiB.
const maxHandshakeFrame = 16 << 10

// readChunk is how much a reader allocates ahead of the bytes that have
// actually arrived, so a peer that announces a large frame and sends little
// of it makes us hold little.
const readChunk = 64 << 10

// BadInputError is the Err of an EventBadInput: From sent bytes that do not
// form a valid frame or message. Evidence holds the first bytes of the
// offending frame (at most 256), for logs and for reports of misbehaviour.
type BadInputError struct {
	From     Peer
	Err      error
	Evidence []byte
}

func (e *BadInputError) Error() string {
	return fmt.Sprintf("transport: bad input from %s: %v", e.From, e.Err)
}

func (e *BadInputError) Unwrap() error { return e.Err }

func badInput(from Peer, err error, frame []byte) *BadInputError {
	return &BadInputError{From: from, Err: err, Evidence: append([]byte(nil), frame[:min(len(frame), 256)]...)}
}

// errFrameTooLarge marks a frame whose announced length exceeds the limit.
var errFrameTooLarge = errors.New("transport: frame exceeds the size limit")

// encodeFrame encodes m for the wire and checks it against maxFrame.
func encodeFrame(m *wire.Message, maxFrame int) ([]byte, error) {
	b, err := wire.Encode(m)
	if err != nil {
		return nil, err
	}
	if len(b) > maxFrame {
		return nil, fmt.Errorf("transport: %s encodes to %d bytes, over the frame limit of %d", m, len(b), maxFrame)
	}
	return b, nil
}

// decodeFrame strictly decodes one received frame. Connection set-up
// messages are the transport's own and are refused once a connection is up.
func decodeFrame(b []byte, maxFrame int) (*wire.Message, error) {
	if len(b) > maxFrame {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", errFrameTooLarge, len(b), maxFrame)
	}
	m, err := wire.Decode(b)
	if err != nil {
		return nil, err
	}
	if m.Challenge != nil || m.Hello != nil || m.Welcome != nil {
		return nil, fmt.Errorf("transport: %s after the connection was set up", m)
	}
	return m, nil
}

// appendFrame appends the length prefix and payload of one frame to dst.
func appendFrame(dst, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// readFrame reads one frame of at most max bytes. It never allocates much
// more than has arrived: a frame above readChunk grows as its bytes come in.
// An announced length over max is errFrameTooLarge (the bytes are not read).
func readFrame(r io.Reader, max int) ([]byte, error) {
	var hdr [frameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return hdr[:], fmt.Errorf("%w: %d bytes announced, limit %d", errFrameTooLarge, n, max)
	}
	size := int(n)
	if size <= readChunk {
		b := make([]byte, size)
		_, err := io.ReadFull(r, b)
		return b, unexpected(err)
	}
	b := make([]byte, 0, readChunk)
	for len(b) < size {
		if len(b) == cap(b) {
			b = append(b, make([]byte, min(cap(b), size-len(b)))...)[:len(b)]
		}
		m := min(cap(b), size) - len(b)
		k, err := io.ReadFull(r, b[len(b):len(b)+m])
		b = b[:len(b)+k]
		if err != nil {
			return nil, unexpected(err)
		}
	}
	return b, nil
}

// unexpected turns an EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
