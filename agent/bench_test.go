package agent

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/internal/testcluster"
)

// report adds the p50 and p99 of lat and the process's CPU per operation
// (servers included: they run in this process too, the same for both).
func report(b *testing.B, lat []time.Duration, cpu time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(lat)), "cpu-ms/op")
}

// An uncontended acquire and release, by the SDK and through the agent
// (HTTP/1.1 over its Unix socket, JSON both ways), on one 4-server cluster
// in this process:
//
//	go test ./agent -run '^$' -bench AcquireRelease -benchtime 300x
func BenchmarkAcquireRelease(b *testing.B) {
	tc := testcluster.Start(b, 4, false)
	b.Run("sdk", func(b *testing.B) {
		ctx := context.Background()
		c, err := bq.Dial(ctx, bq.Config{Cluster: tc.Cluster, Identity: tc.Key()})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		m := c.Mutex("bench-sdk")
		lat := make([]time.Duration, 0, b.N)
		cpu0 := cpuTime()
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			h, err := m.Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := h.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		report(b, lat, cpuTime()-cpu0)
	})
	b.Run("agent", func(b *testing.B) {
		e := benchEnv(b, tc)
		lat := make([]time.Duration, 0, b.N)
		cpu0 := cpuTime()
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			var h HoldView
			if code := e.call("POST", "/v1/locks/bench-agent/acquire", nil, &h); code != http.StatusOK {
				b.Fatalf("acquire: %d", code)
			}
			if code := e.call("DELETE", "/v1/holds/"+h.LockID, nil, nil); code != http.StatusOK {
				b.Fatalf("release: %d", code)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		report(b, lat, cpuTime()-cpu0)
	})
}

// Many holders through one agent: k callers, each taking and releasing a
// lock of its own in a loop, all through one agent (one identity, one
// session):
//
//	go test ./agent -run '^$' -bench ConcurrentHolders -benchtime 2000x
func BenchmarkConcurrentHolders(b *testing.B) {
	tc := testcluster.Start(b, 4, false)
	for _, k := range []int{16, 64} {
		b.Run(fmt.Sprintf("callers=%d", k), func(b *testing.B) {
			e := benchEnv(b, tc)
			var mu sync.Mutex
			lat := make([]time.Duration, 0, b.N)
			var wg sync.WaitGroup
			work := make(chan struct{}, b.N)
			for range b.N {
				work <- struct{}{}
			}
			close(work)
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := range k {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("bench-many-%d-%d", k, i)
					for range work {
						t0 := time.Now()
						var h HoldView
						if code := e.call("POST", "/v1/locks/"+name+"/acquire", nil, &h); code != http.StatusOK {
							b.Errorf("acquire: %d", code)
							return
						}
						if code := e.call("DELETE", "/v1/holds/"+h.LockID, nil, nil); code != http.StatusOK {
							b.Errorf("release: %d", code)
							return
						}
						mu.Lock()
						lat = append(lat, time.Since(t0))
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			report(b, lat, cpuTime()-cpu0)
		})
	}
}

// benchEnv is an agent on tc for a benchmark: its client with the default
// TTL, and an HTTP client that keeps enough connections for every caller.
func benchEnv(b *testing.B, tc *testcluster.Cluster) *env {
	return newEnvOn(b, tc, Config{}, bq.Config{TTL: 10 * time.Second, LossGrace: time.Second})
}
