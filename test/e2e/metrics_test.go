package e2e

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bqserver run --metrics serves Prometheus metrics (client_golang): accesses
// by kind, pushes, active-set sizes, fsync latency, traffic, and the
// standard go_* and process_* collectors.
func TestMetrics(t *testing.T) {
	dir := initCluster(t, 4)
	var ps []*proc
	for i := range 4 {
		args := []string{bin("bqserver"), "run", "--dir", dir, "--id", itoa(i)}
		if i == 0 {
			args = append(args, "--metrics", "127.0.0.1:0")
		}
		ps = append(ps, start(t, "s"+itoa(i), nil, args...))
	}
	for _, p := range ps {
		p.waitFor(20*time.Second, 3, "accepted server connection")
	}
	url := regexp.MustCompile(`url=(http://\S+/metrics)`).FindStringSubmatch(ps[0].output())
	require.NotNil(t, url, ps[0].output())

	cl := start(t, "client", []string{"BQ_IDENTITY=" + filepath.Join(t.TempDir(), "id.key")},
		bin("bqclient"), "--cluster", filepath.Join(dir, "cluster.yaml"), "lock", "m", "--", "true")
	require.Equal(t, 0, cl.waitExit(20*time.Second), cl.output())

	// The loop publishes once a second: wait for the client's accesses to show.
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url[1])
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		body = string(b)
		if regexp.MustCompile(`kind="exit",server="s0"\} [1-9]`).MatchString(body) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A client resends its latest statement when a connection comes up (§6),
	// so a statement sent before the connection finished may count twice.
	for _, kind := range []string{"doorway", "ticket", "exit"} {
		require.Regexp(t, `bq_accesses_total\{kind="`+kind+`",server="s0"\} [1-9]`, body)
	}
	for _, want := range []string{
		`bq_server_incarnation{server="s0"} 1`,
		"# TYPE bq_fsync_seconds histogram",
		`bq_active_set_members{server="s0"} 0`,
		`bq_messages_in_total{from="client",server="s0"}`,
		"# TYPE go_goroutines gauge",
		"# TYPE process_cpu_seconds_total counter",
	} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, `bq_fsync_seconds_count{server="s0"} 0`)
}
