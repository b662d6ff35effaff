package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
)

// The attack benchmark's attackers: waves of short-lived identities, the
// lock-name and message floods by one identity, and unenrolled keys.

// wave runs n short-lived identities, conc at a time: each makes a key,
// dials, takes and releases attack/<i mod 100>, and closes.
func wave(ctx context.Context, cl *certs.Cluster, n, conc int, p *attackPhase) error {
	var next, ok, refused, other atomic.Int64
	var ek errorKinds
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				err := oneIdentity(ctx, cl, fmt.Sprintf("attack/%d", i%100))
				switch {
				case err == nil:
					ok.Add(1)
				case ctx.Err() != nil:
					return
				case errors.Is(err, bq.ErrRefused):
					refused.Add(1)
					ek.add(p, "refused: ", err)
				default:
					other.Add(1)
					ek.add(p, "error: ", err)
				}
			}
		})
	}
	wg.Wait()
	p.Done, p.Refused, p.Other = int(ok.Load()), int(refused.Load()), int(other.Load())
	return ctx.Err()
}

func oneIdentity(ctx context.Context, cl *certs.Cluster, lock string) error {
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := bq.Dial(dctx, bq.Config{Cluster: cl, Identity: key})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	h, err := c.Mutex(lock).Lock(dctx)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := h.Unlock(dctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

// nameFlood is one identity taking fresh lock names as fast as it can.
func nameFlood(ctx context.Context, cl *certs.Cluster, dur time.Duration, p *attackPhase) error {
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := bq.Dial(dctx, bq.Config{Cluster: cl, Identity: key})
	cancel()
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	var ek errorKinds
	end := time.Now().Add(dur)
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		opCtx, cancel := context.WithTimeout(ctx, floodOpTimeout)
		h, err := c.Mutex(fmt.Sprintf("flood/%d", i)).TryLock(opCtx)
		if err == nil {
			err = h.Unlock(opCtx)
			if err == nil {
				p.Done++
			}
		}
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, bq.ErrRefused):
			p.Refused++
			ek.add(p, "refused: ", err)
		default:
			p.Other++
			ek.add(p, "error: ", err)
		}
	}
	return ctx.Err()
}

// messageFlood is one raw client (the transport, no SDK) sending to every
// server, as fast as its send queues take them, Listens of 4,096 made-up
// members, then GetSets on fresh names, then Listens of 100,000 members
// (about 3.4 MB each), each for a third of dur.
// It opens a session first and heartbeats it; replies are counted by kind.
func messageFlood(ctx context.Context, cl *certs.Cluster, dur time.Duration, p *attackPhase) error {
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	if err != nil {
		return err
	}
	tr, err := transport.DialClient(transport.ClientConfig{
		Key: key, Cluster: cl.ID(), Servers: cl.Addresses(), CAPool: cl.CAPool(), IdentifyServer: cl.ServerByCert,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		up      = map[wire.ServerID]bool{}
		allUp   = make(chan struct{})
		upOnce  sync.Once
		drained = make(chan struct{})
	)
	count := func(k string) {
		mu.Lock()
		p.Details[k]++
		mu.Unlock()
	}
	go func() {
		defer close(drained)
		for in := range tr.Inbound() {
			switch in.Kind {
			case transport.EventMessage:
				count("reply " + replyKind(in.Msg))
			case transport.EventConnected:
				count("event connected")
				mu.Lock()
				up[in.From.Server] = true
				n := len(up)
				mu.Unlock()
				if n == len(cl.Servers) {
					upOnce.Do(func() { close(allUp) })
				}
			default:
				count("event " + in.Kind.String())
			}
		}
	}()
	defer func() {
		_ = tr.Close()
		<-drained
	}()
	select {
	case <-allUp:
	case <-time.After(30 * time.Second):
		return errors.New("the raw client did not connect to every server within 30s")
	case <-ctx.Done():
		return ctx.Err()
	}

	members := make([]wire.ClientID, bigListen)
	for i := range members {
		_, _ = rand.Read(members[i][:])
	}
	const session = 1
	servers := slices.Sorted(func(yield func(wire.ServerID) bool) {
		for id := range cl.Addresses() {
			if !yield(id) {
				return
			}
		}
	})
	for _, s := range servers {
		_ = tr.Send(wire.ServerPeer(s), &wire.Message{SessionOpen: &wire.SessionOpen{Session: session, TTLMillis: 10000}})
	}
	fctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var sent, full, failed atomic.Int64
	var req atomic.Uint64
	var wg sync.WaitGroup
	wg.Go(func() { // heartbeats: the session lives through the flood
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for seq := uint64(1); ; seq++ {
			select {
			case <-fctx.Done():
				return
			case <-t.C:
			}
			for _, s := range servers {
				_ = tr.Send(wire.ServerPeer(s), &wire.Message{Heartbeat: &wire.Heartbeat{Session: session, Seq: seq}})
			}
		}
	})
	// Three equal parts, one kind each: a Listen of 100,000 members always
	// costs the connection (the decoder caps arrays at 16,384 elements), so
	// mixed in it would drop the other kinds queued behind it.
	kinds := []struct {
		name string
		make func(r uint64) *wire.Message
	}{
		{"Listen 4096", func(r uint64) *wire.Message {
			return &wire.Message{Listen: &wire.Listen{Req: r, Lock: "flood/listen", Session: session, Attempt: 1, Members: members[:4096]}}
		}},
		{"GetSet", func(r uint64) *wire.Message {
			return &wire.Message{GetSet: &wire.GetSet{Req: r, Lock: fmt.Sprintf("flood/getset/%d", r)}}
		}},
		{"Listen 100000", func(r uint64) *wire.Message {
			return &wire.Message{Listen: &wire.Listen{Req: r, Lock: "flood/listen", Session: session, Attempt: 1, Members: members}}
		}},
	}
	start := time.Now()
	for k, kind := range kinds {
		end := start.Add(dur * time.Duration(k+1) / time.Duration(len(kinds)))
		var kindSent atomic.Int64
		var kw sync.WaitGroup
		for _, s := range servers {
			kw.Go(func() {
				for fctx.Err() == nil && time.Now().Before(end) {
					err := tr.Send(wire.ServerPeer(s), kind.make(req.Add(1)))
					switch {
					case err == nil:
						sent.Add(1)
						kindSent.Add(1)
					case errors.Is(err, transport.ErrQueueFull):
						full.Add(1)
						time.Sleep(time.Millisecond)
					default:
						failed.Add(1)
						count("send error: " + errorKind(err))
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
		kw.Wait()
		mu.Lock()
		p.Details["sent "+kind.name] = int(kindSent.Load())
		mu.Unlock()
	}
	cancel() // ends the heartbeats
	wg.Wait()
	for _, s := range servers {
		_ = tr.Send(wire.ServerPeer(s), &wire.Message{SessionClose: &wire.SessionClose{Req: req.Add(1), Session: session}})
	}
	// Let the replies to what is in flight arrive.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	p.Details["send queue full (retried)"] = int(full.Load())
	p.Done = int(sent.Load())
	for k, v := range p.Details {
		if strings.HasPrefix(k, "reply error limit") {
			p.Refused += v
		} else if strings.HasPrefix(k, "reply error") || strings.HasPrefix(k, "event bad-input") {
			p.Other += v
		}
	}
	p.Other += int(failed.Load())
	return nil
}

// replyKind names a server's message: its kind, and for an error its code
// and limit.
func replyKind(m *wire.Message) string {
	if e := m.Error; e != nil {
		if e.Limit != nil {
			return fmt.Sprintf("error %s %s", e.Code, e.Limit.Name)
		}
		return fmt.Sprintf("error %s", e.Code)
	}
	s := m.String()
	if i := strings.IndexByte(s, '('); i > 0 {
		s = s[:i]
	}
	return s
}

// unenrolled makes n connection attempts to a closed cluster with fresh
// keys and no admission certificate, conc at a time: each dials every
// server and waits until all of them refused it, or wait.
func unenrolled(ctx context.Context, cl *certs.Cluster, n, conc int, wait time.Duration, p *attackPhase) error {
	var next, all, some, none atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	discard := slog.New(slog.DiscardHandler)
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				if next.Add(1) > int64(n) {
					return
				}
				key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
				if err != nil {
					return
				}
				tr, err := transport.DialClient(transport.ClientConfig{
					Key: key, Cluster: cl.ID(), Servers: cl.Addresses(), CAPool: cl.CAPool(), IdentifyServer: cl.ServerByCert, Logger: discard,
				})
				if err != nil {
					mu.Lock()
					p.Details["dial error"]++
					mu.Unlock()
					none.Add(1)
					continue
				}
				refused := map[wire.ServerID]bool{}
				codes := map[string]int{}
				timer := time.NewTimer(wait)
			loop:
				for len(refused) < len(cl.Servers) {
					select {
					case in := <-tr.Inbound():
						switch in.Kind {
						case transport.EventRefused:
							refused[in.From.Server] = true
							var re *transport.RefusedError
							if errors.As(in.Err, &re) {
								codes["refusal events: "+re.Code.String()]++
							} else {
								codes["refusal events: other"]++
							}
						case transport.EventConnected:
							codes["connected (admitted!)"]++
						}
					case <-timer.C:
						break loop
					case <-ctx.Done():
						break loop
					}
				}
				timer.Stop()
				_ = tr.Close()
				switch {
				case len(refused) == len(cl.Servers):
					all.Add(1)
				case len(refused) > 0:
					some.Add(1)
				default:
					none.Add(1)
				}
				mu.Lock()
				for k, v := range codes {
					p.Details[k] += v
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	p.Done = int(all.Load() + some.Load() + none.Load())
	p.Refused = int(all.Load())
	p.Other = int(some.Load() + none.Load())
	p.Details["attempts refused by every server"] = int(all.Load())
	p.Details["attempts refused by some servers within the wait"] = int(some.Load())
	p.Details["attempts refused by none within the wait"] = int(none.Load())
	return ctx.Err()
}
