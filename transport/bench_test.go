package transport

import (
	"log/slog"
	"testing"
	"time"

	"github.com/bq-lock/bq/wire"
)

// BenchmarkRoundTrip measures one request from a client to a server and the
// server's reply (the server echoes), one at a time: the latency of a
// request/reply, not throughput.
func BenchmarkRoundTrip(b *testing.B) {
	msgs := []struct {
		name string
		msg  *wire.Message
	}{
		{"Heartbeat", heartbeat(1)},
		{"4KB", bigSubmit(b, 1, 4<<10)},
	}
	for _, impl := range []string{"mem", "quic"} {
		for _, m := range msgs {
			b.Run(impl+"/"+m.name, func(b *testing.B) {
				server, client := benchPair(b, impl)
				size, err := wire.Encode(m.msg)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(2 * len(size)))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := client.Send(ServerPeer(0), m.msg); err != nil {
						b.Fatal(err)
					}
					for in := range client.Inbound() {
						if in.Kind == EventMessage {
							break
						}
					}
				}
				b.StopTimer()
				_ = server
			})
		}
	}
}

// benchPair makes one server that echoes every message and one client
// connected to it.
func benchPair(b *testing.B, impl string) (server, client Transport) {
	key := newKey(b)
	var all closeAll
	b.Cleanup(all.close)
	switch impl {
	case "mem":
		nw := NewMemNetwork()
		server = all.add(nw.Server(0))
		client = all.add(nw.Client(key))
	case "quic":
		pki := newPKI(b, 1)
		addr := freeAddrs(b, 1)[0]
		log := slog.New(slog.DiscardHandler)
		lim := Limits{BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond}
		peers := map[wire.ServerID]string{0: addr}
		s, err := ListenServer(ServerConfig{ID: 0, ListenAddr: addr, Peers: peers, Cert: pki.certs[0],
			CAPool: pki.pool, IdentifyServer: pki.identify, Limits: lim, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		server = all.add(s)
		c, err := DialClient(ClientConfig{Key: key, Servers: peers, CAPool: pki.pool, IdentifyServer: pki.identify, Limits: lim, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		client = all.add(c)
	}
	go func() {
		for in := range server.Inbound() {
			if in.Kind == EventMessage {
				_ = server.Send(in.From, in.Msg)
			}
		}
	}()
	timeout := time.After(waitTimeout)
	for {
		select {
		case in := <-client.Inbound():
			if in.Kind == EventConnected {
				return server, client
			}
		case <-timeout:
			b.Fatal("client never connected")
		}
	}
}
