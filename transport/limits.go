package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/bq-lock/bq/crypto"
)

// Limits bound everything a transport holds on behalf of its peers
// (docs/protocol.md §6 "Bounds", §8). A zero field takes its default; Defaults
// lists them. Both implementations honour MaxFrame, QueueLen, QueueBytes and
// InboundLen; the rest only concern QUIC.
type Limits struct {
	// MaxFrame is the largest encoded message sent or accepted, in bytes.
	// A peer that announces a larger frame is disconnected (EventBadInput).
	// Default crypto.MaxMessageSize; it cannot be raised above it.
	MaxFrame int
	// QueueLen caps the messages waiting to be sent to one peer (default 1024).
	QueueLen int
	// QueueBytes caps the bytes waiting to be sent to one peer (default 8 MiB).
	// One message is always accepted into an empty queue, so a MaxFrame
	// message can be sent even when QueueBytes < MaxFrame.
	QueueBytes int
	// InboundLen is the buffer of the Inbound channel (default 1024).
	InboundLen int

	// MaxClientConns caps the client connections a server holds at once,
	// in handshake or bound (default 1024). Excess clients get
	// Error{Code: ErrCodeLimit} and are closed.
	MaxClientConns int
	// MaxConnsPerClient caps the bound connections of one ClientID (default
	// 1). A newer connection beyond the cap replaces the oldest one; Send
	// always uses the newest.
	MaxConnsPerClient int
	// MaxObserversPerClient caps the observer connections of one client
	// (docs/protocol.md change 32; default 4): a newer one beyond the cap
	// closes its oldest observer, never the client's own connection.
	MaxObserversPerClient int
	// AcceptRate is how many new connections per second a server starts to
	// handshake (a token bucket of AcceptBurst); excess attempts are refused
	// before any TLS work. Default 200/s; negative disables the limit.
	AcceptRate float64
	// AcceptBurst is the size of the AcceptRate bucket (default 100).
	AcceptBurst int
	// AcceptRatePerAddress is AcceptRate for one source IP address
	// (default 100/s, a bucket of AcceptBurstPerAddress, default 200);
	// negative disables it. At most maxAddressBuckets addresses are
	// tracked at once; past that the limit falls back to AcceptRate alone.
	AcceptRatePerAddress  float64
	AcceptBurstPerAddress int

	// HandshakeTimeout bounds QUIC+TLS and the Challenge/Hello/Welcome
	// exchange (default 10s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that has heard nothing for that long;
	// keep-alives go every third of it (default 30s).
	IdleTimeout time.Duration
	// BackoffMin and BackoffMax bound the reconnect delay, which doubles on
	// each failure and carries ±50% jitter (defaults 100ms and 5s).
	BackoffMin, BackoffMax time.Duration
}

// Defaults returns the limits used for zero fields.
func Defaults() Limits {
	return Limits{
		MaxFrame:              crypto.MaxMessageSize,
		QueueLen:              1024,
		QueueBytes:            8 << 20,
		InboundLen:            1024,
		MaxClientConns:        1024,
		MaxConnsPerClient:     1,
		MaxObserversPerClient: 4,
		AcceptRate:            200,
		AcceptBurst:           100,
		AcceptRatePerAddress:  100,
		AcceptBurstPerAddress: 200,
		HandshakeTimeout:      10 * time.Second,
		IdleTimeout:           30 * time.Second,
		BackoffMin:            100 * time.Millisecond,
		BackoffMax:            5 * time.Second,
	}
}

// withDefaults fills zero fields and checks the rest, one error per bad field.
func (l Limits) withDefaults() (Limits, error) {
	d := Defaults()
	var errs []error
	bad := func(field string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("transport: Limits.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	fillInt := func(field string, v *int, def int) {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			bad(field, "must not be negative (got %d)", *v)
		}
	}
	fillDur := func(field string, v *time.Duration, def time.Duration) {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			bad(field, "must not be negative (got %s)", *v)
		}
	}
	fillInt("MaxFrame", &l.MaxFrame, d.MaxFrame)
	if l.MaxFrame > crypto.MaxMessageSize {
		bad("MaxFrame", "%d exceeds crypto.MaxMessageSize (%d)", l.MaxFrame, crypto.MaxMessageSize)
	}
	fillInt("QueueLen", &l.QueueLen, d.QueueLen)
	fillInt("QueueBytes", &l.QueueBytes, d.QueueBytes)
	fillInt("InboundLen", &l.InboundLen, d.InboundLen)
	fillInt("MaxClientConns", &l.MaxClientConns, d.MaxClientConns)
	fillInt("MaxConnsPerClient", &l.MaxConnsPerClient, d.MaxConnsPerClient)
	fillInt("MaxObserversPerClient", &l.MaxObserversPerClient, d.MaxObserversPerClient)
	if l.AcceptRate == 0 {
		l.AcceptRate = d.AcceptRate
	}
	fillInt("AcceptBurst", &l.AcceptBurst, d.AcceptBurst)
	if l.AcceptRatePerAddress == 0 {
		l.AcceptRatePerAddress = d.AcceptRatePerAddress
	}
	fillInt("AcceptBurstPerAddress", &l.AcceptBurstPerAddress, d.AcceptBurstPerAddress)
	fillDur("HandshakeTimeout", &l.HandshakeTimeout, d.HandshakeTimeout)
	fillDur("IdleTimeout", &l.IdleTimeout, d.IdleTimeout)
	fillDur("BackoffMin", &l.BackoffMin, d.BackoffMin)
	fillDur("BackoffMax", &l.BackoffMax, d.BackoffMax)
	if l.BackoffMax < l.BackoffMin {
		bad("BackoffMax", "%s is below BackoffMin %s", l.BackoffMax, l.BackoffMin)
	}
	return l, errors.Join(errs...)
}
