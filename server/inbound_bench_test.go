package server

import (
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// BenchmarkInboundStatements is one server taking in signed statements from
// many clients, as its runtime does without the sockets: each client's
// frames are decoded on its connection's goroutine (the transport's read
// loop, here one per group of clients) and stepped through the core on one
// goroutine. Each op is one statement (Doorways and Exits of 256 clients,
// each signed by its client, none seen before). "preverify" checks the
// signatures in the read loops (wire.Preverifier, what the server does);
// "in-core" leaves every check to the core. Run it with -cpu 1,2 to see how
// a server scales with its cores: statements/s should nearly double from 1
// to 2 with preverify, and not without.
//
// "core-alone" times the core's goroutine only, on statements decoded and
// checked before the timer starts: the ceiling of statements/s that no
// number of cores lifts (Amdahl's serial part). With preverify, cores
// scale a server until P × (core-alone's ns/op) reaches the read loops'
// per-statement cost, preverify-1's ns/op less core-alone's.
func BenchmarkInboundStatements(b *testing.B) {
	for _, mode := range []string{"preverify", "in-core", "core-alone"} {
		b.Run(mode, func(b *testing.B) { benchInbound(b, mode) })
	}
}

const benchClients = 256

func benchInbound(b *testing.B, mode string) {
	pre := mode != "in-core"
	var servers []*crypto.Parsed
	var signers []*crypto.PrivateKey
	for range 4 {
		k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		servers, signers = append(servers, k.Public), append(signers, k)
	}
	keys := wire.NewKeyring(1, servers)
	cfg := core.DefaultConfig(0, 4, 1, keys, signers[0])
	k, err := core.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	type client struct {
		id     wire.ClientID
		frames [][]byte
	}
	clients := make([]client, benchClients)
	per := (b.N + benchClients - 1) / benchClients
	for i := range clients {
		ck, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		c := &clients[i]
		c.id = wire.ClientID(ck.Public.ID)
		for j := 0; j*benchClients+i < b.N; j++ {
			ph := wire.PhaseDoorway
			if j%2 == 1 {
				ph = wire.PhaseExit
			}
			ss, err := wire.SignStatement(ck, keys.Cluster, &wire.Statement{Lock: fmt.Sprintf("L%d", i), Client: c.id, Session: 1, Attempt: uint64(j/2 + 1), Phase: ph})
			if err != nil {
				b.Fatal(err)
			}
			f, err := wire.Encode(&wire.Message{Submit: &wire.Submit{Req: uint64(j + 1), Statement: ss}})
			if err != nil {
				b.Fatal(err)
			}
			c.frames = append(c.frames, f)
		}
	}
	now := time.Unix(1000, 0)
	for _, c := range clients {
		k.Step(now, core.Input{From: wire.ClientPeer(c.id), Msg: &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 60000}}})
	}
	type in struct {
		from wire.ClientID
		m    *wire.Message
	}
	p := &wire.Preverifier{Keys: &keys, Self: 0}
	// Read loops: a goroutine per group of clients, each client's frames in order.
	loops := 16
	ch := make(chan in, 1024)
	if mode == "core-alone" {
		ch = make(chan in, b.N) // every statement read and checked before the timer
	}
	var wg sync.WaitGroup
	b.ResetTimer()
	if mode == "core-alone" {
		b.StopTimer()
	}
	for l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range per {
				for i := l; i < benchClients; i += loops {
					if j >= len(clients[i].frames) {
						continue
					}
					m, err := wire.Decode(clients[i].frames[j])
					if err != nil {
						panic(err)
					}
					if pre {
						p.Check(m)
					}
					ch <- in{clients[i].id, m}
				}
			}
		}()
	}
	if mode == "core-alone" {
		wg.Wait()
		close(ch)
		b.StartTimer()
	} else {
		go func() { wg.Wait(); close(ch) }()
	}
	// The core: one goroutine. Time moves 2 ms per statement, 256 clients
	// each well under its statement rate.
	done, refused := 0, 0
	for x := range ch {
		now = now.Add(2 * time.Millisecond)
		e := k.Step(now, core.Input{From: wire.ClientPeer(x.from), Msg: x.m})
		if len(e.Send) > 0 && e.Send[0].Msg.Error != nil {
			refused++
		}
		done++
	}
	b.StopTimer()
	if refused > 0 {
		b.Fatalf("%d of %d statements refused", refused, done)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "statements/s")
}
