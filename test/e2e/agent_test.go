package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// requireCurl finds curl: the tests below drive the agent with it, as a
// user of any language would. CI installs it and sets BQ_REQUIRE_CURL, so
// that a machine without it fails instead of skipping.
func requireCurl(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("BQ_REQUIRE_CURL") != "" {
			t.Fatalf("curl is not installed (BQ_REQUIRE_CURL is set): %v", err)
		}
		t.Skipf("curl is not installed: %v", err)
	}
	return p
}

// closedCluster makes a closed cluster of n server processes (bqserver init
// without --open: the default) and enrolls each of names, returning the
// directory and each name's identity file.
func closedCluster(t *testing.T, n int, names ...string) (string, map[string]string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cluster")
	out, code := runCLI(t, "bqserver", "init", "--dir", dir, "--servers", fmt.Sprint(n), "--port-base", fmt.Sprint(freePortBase(t, n)))
	require.Equal(t, 0, code, out)
	ids := map[string]string{}
	work := t.TempDir()
	for _, name := range names {
		ids[name] = filepath.Join(work, name+".identity")
		out, code := runCLI(t, "bqserver", "client", "add", name, "--dir", dir, "--out", ids[name])
		require.Equal(t, 0, code, out)
	}
	runServers(t, dir, n)
	return dir, ids
}

// startAgent starts `bqclient agent` for identity on socket, with args,
// and waits until it serves.
func startAgent(t *testing.T, dir, identity, socket string, args ...string) *proc {
	t.Helper()
	p := start(t, "agent "+filepath.Base(identity), nil, append([]string{bin("bqclient"), "--cluster", filepath.Join(dir, "cluster.yaml"),
		"--identity", identity, "agent", "--socket", socket}, args...)...)
	p.waitFor(20*time.Second, 1, "serving on unix:"+socket)
	return p
}

// agentClient is an HTTP client of the agent at socket.
func agentClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: nil, Dial: func(string, string) (net.Conn, error) {
		return net.Dial("unix", socket)
	}}}
}

// agentCall makes one request of the agent and decodes its JSON answer.
func agentCall(t *testing.T, c *http.Client, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://localhost"+path, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return resp.StatusCode, m
}

// curlLoop is a shell loop of curl processes that take lock through the
// agent at socket, claim a mkdir probe in the critical section (it fails,
// exit 99, if another holder is inside), record the token and release.
func curlLoop(curl, socket, lock string, n int, probe, tokens string) *exec.Cmd {
	script := fmt.Sprintf(`for i in $(seq %d); do
  out=$('%[2]s' -sS --unix-socket '%[3]s' -X POST 'http://localhost/v1/locks/%[4]s/acquire' -d '{"wait": 60}') || exit 3
  id=$(printf %%s "$out" | sed -n 's/.*"lock_id":"\([^"]*\)".*/\1/p')
  tok=$(printf %%s "$out" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
  [ -n "$id" ] || { echo "no hold: $out"; exit 4; }
  mkdir '%[5]s' || exit 99
  echo "$tok" >> '%[6]s'
  sleep 0.005
  rmdir '%[5]s'
  '%[2]s' -sSf --unix-socket '%[3]s' -X DELETE "http://localhost/v1/holds/$id" > /dev/null || exit 5
done`, n, curl, socket, lock, probe, tokens)
	return exec.Command("sh", "-c", script)
}

// Plain curl contends for one lock through one agent (three loops of one
// identity, which queue in the agent) and through a second agent of another
// identity (two loops), on a closed cluster of four server processes: never
// two holders (the mkdir probe), and the tokens grow from each holder to the
// next.
func TestCurlContendsThroughAgents(t *testing.T) {
	curl := requireCurl(t)
	dir, ids := closedCluster(t, 4, "svc-a", "svc-b")
	work := t.TempDir()
	sa, sb := filepath.Join(work, "a.sock"), filepath.Join(work, "b.sock")
	startAgent(t, dir, ids["svc-a"], sa)
	startAgent(t, dir, ids["svc-b"], sb)

	probe, tokens := filepath.Join(work, "probe"), filepath.Join(work, "tokens")
	const rounds = 8
	var wg sync.WaitGroup
	errs := make([]error, 5)
	outs := make([]bytes.Buffer, 5)
	for i := range 5 {
		sock := sa
		if i >= 3 {
			sock = sb
		}
		cmd := curlLoop(curl, sock, "shared-resource", rounds, probe, tokens)
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		b := bound(cmd)
		t.Cleanup(b.kill)
		require.NoError(t, cmd.Start())
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cmd.Wait()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the curl loops did not finish within 3 minutes (liveness)")
	}
	for i := range errs {
		require.NoError(t, errs[i], "loop %d (exit 99: two holders overlapped):\n%s", i, outs[i].String())
	}
	lines := readLines(t, tokens)
	require.Len(t, lines, 5*rounds)
	for i := 1; i < len(lines); i++ {
		require.True(t, tokenLess(t, lines[i-1], lines[i]), "token %d (%s) is not above the one before (%s)", i, lines[i], lines[i-1])
	}
}

// kill -9 of an agent: its caller's hold stream ends (a broken connection,
// never silence), and every hold it had is released at the servers within
// about 2×TTL, so that another client enters.
func TestKilledAgentsHoldsAreReleased(t *testing.T) {
	curl := requireCurl(t)
	dir, ids := closedCluster(t, 4, "svc-a", "svc-b")
	sock := filepath.Join(t.TempDir(), "a.sock")
	const ttl = 2 * time.Second
	agent := startAgent(t, dir, ids["svc-a"], sock, "--ttl", ttl.String())
	c := agentClient(sock)
	code, hold := agentCall(t, c, "POST", "/v1/locks/unary/acquire", "")
	require.Equal(t, http.StatusOK, code, "%v", hold)
	stream := start(t, "curl hold", nil, curl, "-sSN", "--unix-socket", sock, "-X", "POST", "http://localhost/v1/locks/streamed/hold", "-d", `{"ping": 0.2}`)
	stream.waitFor(20*time.Second, 1, `"event":"acquired"`)

	require.NoError(t, agent.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	stream.waitExit(5 * time.Second)
	t.Logf("the hold stream ended %v after the kill", time.Since(killed).Round(time.Millisecond))

	var wg sync.WaitGroup
	entered := make([]time.Duration, 2)
	for i, name := range []string{"unary", "streamed"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, code := runCLI(t, "bqclient", "--cluster", filepath.Join(dir, "cluster.yaml"), "--identity", ids["svc-b"],
				"lock", name, "--timeout", "20s", "--", "true")
			require.Equal(t, 0, code, out)
			entered[i] = time.Since(killed)
		}()
		wg.Wait() // one identity, one process at a time
	}
	for i, d := range entered {
		t.Logf("another client entered lock %d %v after the kill", i, d.Round(time.Millisecond))
		// The servers reset a silent session within about 2×TTL (and two
		// vote delays and ticks, change 66); the rest is the client's dial.
		require.Less(t, d, 2*ttl+3*time.Second)
	}
}

// rss is a process's resident memory now and at its peak, from /proc.
func rss(t *testing.T, pid int) (now, peak int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			kb, _ := strconv.Atoi(f[1])
			if f[0] == "VmRSS:" {
				now = kb
			} else {
				peak = kb
			}
		}
	}
	return now, peak
}

// Hostile local input against a real agent process: 10,000 connections at
// once, each a long poll; requests that never finish their head; garbage;
// oversize headers and bodies; unknown lock_ids. Each gets a clear answer
// (or is cut off), the agent stays up, serves its holder throughout, and its
// memory stays bounded (the figures are logged).
func TestAgentUnderHostileInput(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc to read the agent's memory")
	}
	dir, ids := closedCluster(t, 4, "svc")
	sock := filepath.Join(t.TempDir(), "a.sock")
	agent := startAgent(t, dir, ids["svc"], sock)
	pid := agent.cmd.Process.Pid
	c := agentClient(sock)
	code, hold := agentCall(t, c, "POST", "/v1/locks/kept/acquire", "")
	require.Equal(t, http.StatusOK, code)
	id := hold["lock_id"].(string)
	base, _ := rss(t, pid)

	// 10,000 connections, each asking a long poll on the hold.
	const conns = 10000
	req := fmt.Sprintf("GET /v1/holds/%s/wait?wait=60 HTTP/1.1\r\nHost: localhost\r\n\r\n", id)
	statuses := map[string]int{}
	var mu sync.Mutex
	var open []net.Conn
	var wg sync.WaitGroup
	closing := make(chan struct{}) // closed when the test closes the connections it left waiting
	for i := 0; i < conns; i++ {
		// A full accept backlog says EAGAIN: a caller tries again.
		conn, err := net.Dial("unix", sock)
		for try := 0; err != nil && errors.Is(err, syscall.EAGAIN) && try < 500; try++ {
			time.Sleep(10 * time.Millisecond)
			conn, err = net.Dial("unix", sock)
		}
		if err != nil {
			mu.Lock()
			statuses["dial: "+err.Error()]++
			mu.Unlock()
			continue
		}
		open = append(open, conn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			// A connection past the bound may be answered and closed
			// before the request is written: the answer is still there.
			_, _ = conn.Write([]byte(req))
			line, err := bufio.NewReader(conn).ReadString('\n')
			mu.Lock()
			defer mu.Unlock()
			closed := false
			select {
			case <-closing:
				closed = true
			default:
			}
			switch {
			case err != nil && closed:
				statuses["waiting (a long poll held)"]++
			case err != nil:
				statuses["closed: "+err.Error()]++
			default:
				statuses[strings.TrimSpace(line)]++
			}
		}()
	}
	// The long polls the agent took wait; the rest were answered at once.
	waitUntil(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for k, v := range statuses {
			if !strings.HasPrefix(k, "waiting") {
				n += v
			}
		}
		return n >= conns-1024
	})
	during, peak := rss(t, pid)
	code, health := agentCall(t, c, "GET", "/v1/health", "")
	// The agent answers its holder while flooded: the health check may be
	// refused a connection (503) but its hold is still valid.
	t.Logf("health during the flood: %d %v", code, health["status"])
	close(closing)
	for _, conn := range open {
		conn.Close()
	}
	wg.Wait()
	t.Logf("10,000 connections: %v", statuses)
	// The holder's own keep-alive connection holds one of the 2048 places
	// (--max-conns).
	held, tooMany, refused := statuses["waiting (a long poll held)"], statuses["HTTP/1.1 429 Too Many Requests"], statuses["HTTP/1.1 503 Service Unavailable"]
	require.Equal(t, 1024, held, "exactly --max-streams long polls held: %v", statuses)
	require.Equal(t, conns, held+tooMany+refused, "every connection answered or held: %v", statuses)
	require.InDelta(t, conns-2048, refused, 2, "connections past --max-conns refused: %v", statuses)

	// Heads never finished, garbage, an oversize header, an oversize body.
	slow := make([]net.Conn, 100)
	for i := range slow {
		conn, err := net.Dial("unix", sock)
		require.NoError(t, err)
		_, err = conn.Write([]byte("GET /v1/health HTTP/1.1\r\nHost: x\r\n"))
		require.NoError(t, err)
		slow[i] = conn
	}
	for _, raw := range []string{
		"\x00\x01\x02 garbage\r\n\r\n",
		"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n",
		"POST /v1/locks/x/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n" + strings.Repeat("{", 100<<10),
	} {
		conn, err := net.Dial("unix", sock)
		require.NoError(t, err)
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = conn.Write([]byte(raw))
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		require.Regexp(t, `^HTTP/1.1 4\d\d `, line, "%.40q", raw)
		t.Logf("%.30q... → %s", raw, strings.TrimSpace(line))
	}
	for _, conn := range slow {
		_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
		_, err := bufio.NewReader(conn).ReadString('\n')
		require.Error(t, err, "a request head that never ends is cut off")
		require.False(t, os.IsTimeout(err), "cut off by the agent within its 5 s, not by our deadline")
		conn.Close()
	}
	for _, bad := range []string{"h_AAAAAAAAAAAAAAAAAAAAAA", "../../etc/passwd", strings.Repeat("x", 4000)} {
		code, _ := agentCall(t, c, "DELETE", "/v1/holds/"+bad, "")
		require.Equal(t, http.StatusNotFound, code)
	}

	code, got := agentCall(t, c, "GET", "/v1/holds/"+id, "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, true, got["valid"], "the hold survived the flood: %v", got)
	code, _ = agentCall(t, c, "GET", "/v1/health", "")
	require.Equal(t, http.StatusOK, code)
	after, peak2 := rss(t, pid)
	t.Logf("agent memory: %d KiB before, %d KiB with 10,000 connections (peak %d KiB), %d KiB after (peak %d KiB)", base, during, peak, after, peak2)
	require.Less(t, peak2, 128<<10, "the agent's peak memory stays under 128 MiB")
}

// An agent with --http serves its Unix socket without a token (its file
// mode guards it) and its TCP listener only with the bearer token of
// --token-file, which it made (mode 0600) since it did not exist.
func TestAgentWantsTheTokenOnTCPOnly(t *testing.T) {
	dir, ids := closedCluster(t, 4, "svc")
	work := t.TempDir()
	sock, tokenFile := filepath.Join(work, "a.sock"), filepath.Join(work, "agent.token")
	port := freePortBase(t, 1) // a free UDP port; TCP on it is free too, most likely
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	startAgent(t, dir, ids["svc"], sock, "--http", addr, "--token-file", tokenFile)
	st, err := os.Stat(tokenFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	token, err := os.ReadFile(tokenFile)
	require.NoError(t, err)

	code, _ := agentCall(t, agentClient(sock), "GET", "/v1/health", "")
	require.Equal(t, http.StatusOK, code, "the socket asks no token")
	get := func(auth string) int {
		req, err := http.NewRequest("GET", "http://"+addr+"/v1/health", nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, get(""))
	require.Equal(t, http.StatusUnauthorized, get("Bearer wrong"))
	require.Equal(t, http.StatusOK, get("Bearer "+strings.TrimSpace(string(token))))

	// Beyond loopback only with --public.
	out, code2 := runCLI(t, "bqclient", "--cluster", filepath.Join(dir, "cluster.yaml"), "--identity", ids["svc"], "agent",
		"--socket", filepath.Join(work, "b.sock"), "--http", "0.0.0.0:0", "--token-file", tokenFile)
	require.Equal(t, 2, code2, out)
	require.Contains(t, out, "--public")
}

// A hold of an identity the operator revokes is lost, and its stream says
// why: "revoked", not a lease's mechanics.
func TestAgentHoldOfARevokedIdentity(t *testing.T) {
	curl := requireCurl(t)
	dir, ids := closedCluster(t, 4, "svc")
	sock := filepath.Join(t.TempDir(), "a.sock")
	startAgent(t, dir, ids["svc"], sock, "--ttl", "2s")
	stream := start(t, "curl hold", nil, curl, "-sSN", "--unix-socket", sock, "-X", "POST", "http://localhost/v1/locks/held/hold")
	stream.waitFor(20*time.Second, 1, `"event":"acquired"`)
	out, code := runCLI(t, "bqserver", "client", "revoke", "svc", "--dir", dir)
	require.Equal(t, 0, code, out)
	stream.waitFor(20*time.Second, 1, `"event":"lost"`)
	require.Contains(t, stream.output(), `"reason":"revoked"`)
	require.Contains(t, stream.output(), "revoked by the cluster's operator")
}
