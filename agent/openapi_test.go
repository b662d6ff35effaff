package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"
)

// The OpenAPI document (agent/openapi.yaml, served at /v1/openapi.yaml) is
// what the agent serves: its paths and methods are the agent's routes, and
// every request and answer of an exercise that calls every operation — its
// errors and every line of its streams included — validates against it
// (kin-openapi's validator: other languages generate clients from this
// document, so a field it misses or misnames is a bug).
func TestOpenAPIDescribesWhatTheAgentServes(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context))

	e := newEnv(t, Config{})
	documented := map[string][]string{}
	for path, item := range doc.Paths.Map() {
		for m := range item.Operations() {
			documented[path] = append(documented[path], m)
		}
		sort.Strings(documented[path])
	}
	require.Equal(t, e.a.Routes(), documented, "the document's paths and methods are the agent's routes")

	// The document itself is served as YAML: a string to the validator.
	openapi3filter.RegisterBodyDecoder("application/yaml", func(r io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(r)
		return string(b), err
	})
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	v := &validating{t: t, router: router, event: doc.Components.Schemas["Event"].Value, base: e.cl.Transport, seen: map[string]bool{}, events: map[string]bool{}}
	e.cl = &http.Client{Transport: v}

	// Every operation, with answers of each kind.
	var served []byte
	func() {
		resp, err := e.cl.Get("http://localhost/v1/openapi.yaml")
		require.NoError(t, err)
		defer resp.Body.Close()
		served, _ = io.ReadAll(resp.Body)
	}()
	require.Equal(t, OpenAPI, served)
	e.call("GET", "/v1/health", nil, nil)
	h := e.acquire("api", map[string]any{"wait": "5s", "ttl": 60, "request_id": "r1"})
	e.call("GET", "/v1/holds/"+h.LockID, nil, nil)
	e.call("GET", "/v1/holds/"+h.LockID+"/wait?wait=0.05", nil, nil)
	e.call("GET", "/v1/locks/api", nil, nil)
	e.call("GET", "/v1/locks/api?index=1&wait=0.05", nil, nil)
	v.invalid = true // requests the agent must refuse: only the answers must validate
	e.call("POST", "/v1/locks/api/acquire", map[string]any{"try": true}, nil)
	e.call("POST", "/v1/locks/api/acquire", map[string]any{"mode": "bogus"}, nil)
	e.call("POST", "/v1/locks/api/acquire", strings.Repeat(" ", MaxBody+1), nil)
	e.call("GET", "/v1/holds/h_nope", nil, nil)
	v.invalid = false
	s := e.stream("POST", "/v1/locks/api2/hold", map[string]any{"ping": 0.1, "mode": "shared"})
	require.Equal(t, "acquired", s.next(t).Event)
	for ev := range s.events { // a ping of the held hold, with its valid_until
		if ev.Event == "ping" && ev.ValidUntil != nil {
			break
		}
	}
	e.call("DELETE", "/v1/holds/"+h.LockID, nil, nil)
	e.call("POST", "/v1/locks/api/acquire", map[string]any{"request_id": "r1", "wait": "5s", "ttl": 60}, nil) // request_used
	e.call("POST", "/v1/locks/api3/acquire", map[string]any{"mode": "permits", "permits": 3}, nil)

	c := e.stream("POST", "/v1/elections/apie/campaign", map[string]any{"value": "v1", "ping": 0.1})
	ev := c.next(t)
	require.Equal(t, "leader", ev.Event)
	o := e.stream("GET", "/v1/elections/apie/observe?ping=0.1", nil)
	require.Equal(t, "leader", o.next(t).Event)
	e.call("GET", "/v1/elections/apie/leader", nil, nil)
	e.call("POST", "/v1/elections/apie/proclaim", map[string]any{"lock_id": ev.Hold.LockID, "value": "v2"}, nil)
	e.call("POST", "/v1/elections/apie/resign", map[string]any{"lock_id": ev.Hold.LockID}, nil)
	require.Equal(t, stateReleased, c.next(t).Event)
	e.call("GET", "/v1/elections/nobody/leader", nil, nil) // no_leader
	e.call("POST", "/v1.0-alpha1/lock/bq", map[string]any{"resourceId": "d", "lockOwner": "o", "expiryInSeconds": 30}, nil)
	e.call("POST", "/v1.0-alpha1/lock/bq", map[string]any{"resourceId": "d", "lockOwner": "p", "expiryInSeconds": 30}, nil)
	e.call("POST", "/v1.0-alpha1/unlock/bq", map[string]any{"resourceId": "d", "lockOwner": "p"}, nil)
	e.call("POST", "/v1.0-alpha1/unlock/bq", map[string]any{"resourceId": "d", "lockOwner": "o"}, nil)
	s.cancel()
	o.cancel()
	c.cancel()
	e.cl.CloseIdleConnections()
	v.wait()

	v.mu.Lock()
	defer v.mu.Unlock()
	for path, item := range doc.Paths.Map() {
		for m := range item.Operations() {
			require.True(t, v.seen[m+" "+path], "the exercise never called %s %s", m, path)
		}
	}
	require.Empty(t, v.failures, "requests or answers outside the document")
	for _, kind := range []string{"waiting", "acquired", "ping+valid_until", "leader", "released"} {
		require.True(t, v.events[kind], "no %s line validated", kind)
	}
}

// validating is a transport that validates every request (unless invalid
// is set), every answer, and each line of a stream, against the document.
type validating struct {
	t       *testing.T
	router  routers.Router
	event   *openapi3.Schema
	base    http.RoundTripper
	invalid bool

	mu       sync.Mutex
	seen     map[string]bool
	failures []string
	lines    int
	events   map[string]bool // the kinds of stream lines seen
	streams  sync.WaitGroup
}

func (v *validating) fail(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if i := strings.Index(msg, "\nSchema:"); i > 0 { // the validator's dump of the schema
		msg = msg[:i]
	}
	v.failures = append(v.failures, msg)
}

func (v *validating) wait() { v.streams.Wait() }

func (v *validating) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	route, params, err := v.router.FindRoute(r)
	if err != nil {
		v.fail("%s %s: no route in the document: %v", r.Method, r.URL.Path, err)
		return v.base.RoundTrip(r)
	}
	v.mu.Lock()
	v.seen[r.Method+" "+route.Path] = true
	v.mu.Unlock()
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: opts}
	if !v.invalid {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			v.fail("request %s %s %.300s: %v", r.Method, r.URL, body, err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := v.base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	if resp.Header.Get("Content-Type") == "application/x-ndjson" {
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
			Options: &openapi3filter.Options{ExcludeResponseBody: true}}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			v.fail("answer to %s %s: %v", r.Method, r.URL, err)
		}
		pr, pw := io.Pipe()
		orig := resp.Body
		v.streams.Add(1)
		go func() {
			defer v.streams.Done()
			v.lineCheck(io.TeeReader(orig, pw), r)
			pw.Close()
		}()
		resp.Body = &pipeBody{pr, orig}
		return resp, nil
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(b)), Options: &openapi3filter.Options{MultiError: true}}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		v.fail("answer %d to %s %s: %.300s: %v", resp.StatusCode, r.Method, r.URL, b, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

// lineCheck validates each line of a stream against the Event schema.
func (v *validating) lineCheck(r io.Reader, req *http.Request) {
	dec := json.NewDecoder(r)
	for {
		var line any
		if err := dec.Decode(&line); err != nil {
			return
		}
		if err := v.event.VisitJSON(line, openapi3.MultiErrors()); err != nil {
			v.fail("a line of %s %s: %v: %v", req.Method, req.URL, line, err)
		}
		v.mu.Lock()
		v.lines++
		if m, ok := line.(map[string]any); ok {
			kind, _ := m["event"].(string)
			if _, ok := m["valid_until"]; ok {
				kind += "+valid_until"
			}
			v.events[kind] = true
		}
		v.mu.Unlock()
	}
}

// pipeBody reads the teed stream and closes the original body.
type pipeBody struct {
	*io.PipeReader
	orig io.Closer
}

func (p *pipeBody) Close() error {
	p.PipeReader.Close()
	return p.orig.Close()
}
