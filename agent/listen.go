package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// ListenUnix listens on a Unix socket at path with the given file mode
// (0600: this user only; 0660 with group: that group too). A socket file
// left by an agent that died is replaced; one an agent still serves is not
// (the error says so). Close removes the file.
func ListenUnix(path string, mode fs.FileMode, group string) (net.Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("%s is %d bytes long; a Unix socket's path has at most %d: give a shorter --socket", path, len(path), maxSocketPath)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket: remove it, or give another --socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("another agent serves %s: stop it first, or give another --socket", path)
		}
		if err := os.Remove(path); err != nil { // left by an agent that died
			return nil, err
		}
	}
	gid := -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			return nil, fmt.Errorf("--socket-group: %w", err)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return nil, fmt.Errorf("--socket-group %s: gid %q", group, g.Gid)
		}
	}
	// The socket is made with no permission for anyone but its owner, and
	// opened up to mode only then: no moment when others may connect.
	l, err := listenPrivate(path)
	if err != nil {
		return nil, err
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("--socket-group %s: %w", group, err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// maxSocketPath is the longest path a Unix socket can have (sun_path, with
// its terminating NUL, is 108 bytes on Linux, 104 on the BSDs and macOS).
const maxSocketPath = 103

// LimitListener accepts at most max connections at once; past that, a new
// connection gets a 503 answer with a JSON error and is closed at once, so
// that a caller hears why and the agent keeps nothing for it.
func LimitListener(l net.Listener, max int) net.Listener {
	return &limitListener{Listener: l, max: max}
}

type limitListener struct {
	net.Listener
	max int
	mu  sync.Mutex
	n   int // INVARIANT: the connections accepted and not yet closed; ≤ max
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.n >= l.max {
			l.mu.Unlock()
			go refuse(c)
			continue
		}
		l.n++
		l.mu.Unlock()
		return &limitedConn{Conn: c, l: l}, nil
	}
}

// tooManyConns is the whole answer to a connection over the bound.
var tooManyConns = func() []byte {
	body := `{"error":{"code":"too_many_requests","message":"the agent has as many connections open as it takes (--max-conns): close one"}}` + "\n"
	return []byte(fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
}()

func refuse(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(tooManyConns)
	c.Close()
}

type limitedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.n--
		c.l.mu.Unlock()
	})
	return err
}

// IsLoopback reports whether a TCP listen address is on loopback only.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ReadToken reads a bearer token from file, making one (32 random bytes in
// hex, mode 0600) if the file does not exist. A token file others may read
// is refused.
func ReadToken(file string, random func([]byte) error) ([]byte, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		var r [32]byte
		if err := random(r[:]); err != nil {
			return nil, err
		}
		tok := []byte(fmt.Sprintf("%x", r[:]))
		if err := os.WriteFile(file, append(tok, '\n'), 0o600); err != nil {
			return nil, err
		}
		return tok, nil
	}
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %v): chmod 600 it", file, fi.Mode().Perm())
	}
	tok := trimSpace(b)
	if len(tok) < 16 {
		return nil, fmt.Errorf("%s holds a token of %d bytes: want at least 16", file, len(tok))
	}
	return tok, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}
