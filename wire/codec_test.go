package wire_test

import (
	"bytes"
	crand "crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/testseed"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(tb, err)
	return b
}

// The generator covers every kind of the union, and the examples of each kind
// together set every field of it (so a round trip checks every field).
func TestExamplesCoverEveryKindAndField(t *testing.T) {
	exs := examples(t)
	byKind := map[string][]example{}
	for _, e := range exs {
		byKind[e.kind()] = append(byKind[e.kind()], e)
		body := e.msg.Body()
		require.NotNil(t, body, e.name)
		fv := reflect.ValueOf(e.msg).Elem().FieldByName(e.kind())
		require.True(t, fv.IsValid() && !fv.IsNil(), "%s: name does not match its body", e.name)
		require.Equal(t, fv.Interface(), body, "%s: name does not match its body", e.name)
	}
	for _, kind := range messageKinds() {
		require.NotEmpty(t, byKind[kind], "no example of %s", kind)
		field, _ := reflect.TypeFor[wire.Message]().FieldByName(kind)
		want := map[string]bool{}
		allPaths(kind, field.Type, want)
		got := map[string]bool{}
		for _, e := range byKind[kind] {
			setPaths(kind, reflect.ValueOf(e.msg).Elem().FieldByName(kind), got)
		}
		for p := range want {
			require.True(t, got[p], "no example of %s sets %s", kind, p)
		}
	}
	require.Len(t, byKind, len(messageKinds()))
}

func TestRoundTrip(t *testing.T) {
	for _, e := range examples(t) {
		t.Run(e.name, func(t *testing.T) {
			b, err := wire.Encode(e.msg)
			require.NoError(t, err)
			m, err := wire.Decode(b)
			require.NoError(t, err)
			require.Equal(t, e.msg, m)
			again, err := wire.Encode(m)
			require.NoError(t, err)
			require.Equal(t, b, again, "encoding is deterministic")
			checkDecoded(t, b, m)
		})
	}
}

// Every strict prefix of a valid frame is refused, without a panic.
func TestTruncatedFramesRejected(t *testing.T) {
	for _, e := range examples(t) {
		t.Run(e.name, func(t *testing.T) {
			b, err := wire.Encode(e.msg)
			require.NoError(t, err)
			for i := 0; i < len(b); i++ {
				m, err := wire.Decode(b[:i])
				require.Error(t, err, "prefix of %d/%d bytes decoded", i, len(b))
				require.Nil(t, m)
			}
			// And a trailing byte is refused too.
			_, err = wire.Decode(append(bytes.Clone(b), 0))
			require.Error(t, err)
		})
	}
}

// Random bytes, and random mutations of valid frames, never panic Decode;
// whatever it accepts round-trips (§10: a new seed each run, which every
// failure names with the command that replays it).
func TestDecodeRandomInput(tt *testing.T) {
	seed := *decodeSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t := testseed.New(tt, seed, fmt.Sprintf("go test ./wire -run '^TestDecodeRandomInput$' -decode-seed %d", seed))
	r := rand.New(rand.NewPCG(seed, 0xb9))
	var valid [][]byte
	for _, e := range examples(t) {
		b, err := wire.Encode(e.msg)
		require.NoError(t, err)
		valid = append(valid, b)
	}
	n := 10000
	accepted := 0
	try := func(data []byte) {
		var m *wire.Message
		var err error
		require.NotPanics(t, func() { m, err = wire.Decode(data) }, "input %x", data)
		if err == nil {
			accepted++
			checkDecoded(t, data, m)
		} else {
			require.True(t, strings.HasPrefix(err.Error(), "wire:") || strings.HasPrefix(err.Error(), "crypto:"), err.Error())
		}
	}
	for i := 0; i < n; i++ {
		data := make([]byte, r.IntN(300))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		if len(data) > 0 && i%2 == 0 {
			data[0] = 0xa1 // a one-pair map, like every frame
			if len(data) > 1 {
				data[1] = byte(1 + r.IntN(20)) // one of the union's keys
			}
		}
		try(data)
	}
	for i := 0; i < n; i++ {
		data := bytes.Clone(valid[r.IntN(len(valid))])
		for k := 1 + r.IntN(4); k > 0; k-- {
			switch p := r.IntN(len(data)); r.IntN(4) {
			case 0:
				data[p] ^= byte(1 << r.IntN(8))
			case 1:
				data[p] = byte(r.Uint32())
			case 2:
				data = append(data[:p], data[p+1:]...)
			default:
				data = append(data[:p], append([]byte{byte(r.Uint32())}, data[p:]...)...)
			}
			if len(data) == 0 {
				break
			}
		}
		try(data)
	}
	t.Logf("%d of %d inputs decoded", accepted, 2*n)
}

var decodeSeed = flag.Uint64("decode-seed", 0, "replay TestDecodeRandomInput with this seed")

func TestEncodeRefusesZeroOrTwoBodies(t *testing.T) {
	_, err := wire.Encode(&wire.Message{})
	require.ErrorContains(t, err, "exactly one body")
	_, err = wire.Encode(&wire.Message{Ack: &wire.Ack{Req: 1}, Heartbeat: &wire.Heartbeat{Session: 1}})
	require.ErrorContains(t, err, "exactly one body")
	require.Nil(t, (&wire.Message{}).Body())
	require.Equal(t, "Message(invalid)", (&wire.Message{}).String())
	require.Equal(t, "Message(invalid)", (&wire.Message{Ack: &wire.Ack{}, Read: &wire.Read{}}).String())

	// Every pair of kinds is refused.
	exs := examples(t)
	for i := range exs {
		for j := range exs {
			if exs[i].kind() == exs[j].kind() {
				continue
			}
			m := *exs[i].msg
			reflect.ValueOf(&m).Elem().FieldByName(exs[j].kind()).Set(reflect.ValueOf(exs[j].msg).Elem().FieldByName(exs[j].kind()))
			require.Nil(t, m.Body(), "%s + %s", exs[i].name, exs[j].name)
			_, err := wire.Encode(&m)
			require.Error(t, err)
		}
	}
}

func TestDecodeRefusesZeroOrTwoBodies(t *testing.T) {
	for name, h := range map[string]string{
		"empty map":                  "a0",
		"null":                       "f6",
		"null body":                  "a1 0a f6",
		"two bodies (Heartbeat+Ack)": "a2 05 a2 01 01 02 02 0a a1 01 01",
		"two bodies, one empty":      "a2 05 a0 0a a1 01 01",
		"duplicate body key":         "a2 0a a1 01 01 0a a1 01 02",
		"unknown body key 99":        "a1 18 63 a1 01 01",
		"body key 0":                 "a1 00 a1 01 01",
		"array frame":                "81 a1 01 01",
	} {
		m, err := wire.Decode(unhex(t, h))
		require.Error(t, err, name)
		require.Nil(t, m)
	}
	// The key after the union's last one is a kind this version does not
	// know: not malformed, but skipped (a newer minor version's).
	next := len(messageKinds()) + 1
	require.Less(t, next, 256)
	_, err := wire.Decode([]byte{0xa1, 0x18, byte(next), 0xa1, 0x01, 0x01})
	require.ErrorIs(t, err, wire.ErrUnknownKind, "key %d", next)

	// The one-body frames those are built from do decode.
	m, err := wire.Decode(unhex(t, "a1 0a a1 01 01"))
	require.NoError(t, err)
	require.Equal(t, &wire.Message{Ack: &wire.Ack{Req: 1}}, m)
	m, err = wire.Decode(unhex(t, "a1 05 a2 01 01 02 02"))
	require.NoError(t, err)
	require.Equal(t, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 2}}, m)
	m, err = wire.Decode(unhex(t, "a1 0a a0"))
	require.NoError(t, err, "an empty body is a body (all its fields zero)")
	require.Equal(t, &wire.Message{Ack: &wire.Ack{}}, m)
}

func TestDecodeRefusesOversize(t *testing.T) {
	big := &wire.Message{Error: &wire.Error{Req: 1, Code: wire.ErrCodeLimit, Detail: "x"}}
	b, err := wire.Encode(big)
	require.NoError(t, err)
	padded := append(b, make([]byte, crypto.MaxMessageSize)...)
	_, err = wire.Decode(padded)
	require.ErrorIs(t, err, crypto.ErrOversize)

	// Encode refuses to produce a frame over the limit.
	f := fx(t)
	s := f.stmt(t, f.alice, wire.PhaseDoorway, 1, 1, 0, nil)
	many := make([]wire.SignedStatement, crypto.MaxMessageSize/150)
	for i := range many {
		many[i] = s
	}
	_, err = wire.Encode(&wire.Message{MembersReply: &wire.MembersReply{Req: 1, Lock: testLock, Members: many}})
	require.ErrorContains(t, err, "exceeds the limit")
}

func TestDecodeRefusesOverlongArrays(t *testing.T) {
	// Listen with MaxArrayElements+1 members: refused on the array header.
	id := "5820" + strings.Repeat("11", 32)
	n := crypto.MaxArrayElements + 1
	frame := "a1 0b a5 01 01 02 61 6c 03 01 04 01 05 99" + hex.EncodeToString([]byte{byte(n >> 8), byte(n)}) + strings.Repeat(id, n)
	_, err := wire.Decode(unhex(t, frame))
	require.ErrorContains(t, err, "array")
	n = crypto.MaxArrayElements
	frame = "a1 0b a5 01 01 02 61 6c 03 01 04 01 05 99" + hex.EncodeToString([]byte{byte(n >> 8), byte(n)}) + strings.Repeat(id, n)
	m, err := wire.Decode(unhex(t, frame))
	require.NoError(t, err)
	require.Len(t, m.Listen.Members, n)
}

func TestValidateBounds(t *testing.T) {
	lockMsgs := map[string]func(string) *wire.Message{
		"MembersReply": func(l string) *wire.Message { return &wire.Message{MembersReply: &wire.MembersReply{Req: 1, Lock: l}} },
		"Listen":       func(l string) *wire.Message { return &wire.Message{Listen: &wire.Listen{Req: 1, Lock: l}} },
		"GetSet":       func(l string) *wire.Message { return &wire.Message{GetSet: &wire.GetSet{Req: 1, Lock: l}} },
		"Update":       func(l string) *wire.Message { return &wire.Message{Update: &wire.Update{Req: 1, Lock: l}} },
		"Read":         func(l string) *wire.Message { return &wire.Message{Read: &wire.Read{Req: 1, Lock: l}} },
		"Status":       func(l string) *wire.Message { return &wire.Message{Status: &wire.Status{Req: 1, Lock: l}} },
	}
	good := []string{"a", "locks/orders", strings.Repeat("x", wire.MaxLockName), "ü-ロック", "with space", strings.Repeat("é", wire.MaxLockName/2)}
	bad := map[string]string{
		"empty":              "",
		"too long":           strings.Repeat("x", wire.MaxLockName+1),
		"too long multibyte": strings.Repeat("é", wire.MaxLockName/2) + "x",
		"NUL":                "a\x00b",
		"newline":            "a\nb",
		"carriage return":    "a\rb",
		"tab":                "a\tb",
		"escape":             "\x1b[31mred",
		"DEL":                "a\x7f",
		"C1 NEL (U+0085)":    "a\u0085b",
		"C1 CSI (U+009B)":    "a\u009b31m",
		"invalid UTF-8":      "a\xffb",
		"truncated UTF-8":    "a\xc3",
		"surrogate as UTF-8": "\xed\xa0\x80",
		"overlong NUL UTF-8": "\xc0\x80",
	}
	for kind, mk := range lockMsgs {
		for _, l := range good {
			m := mk(l)
			require.NoError(t, m.Validate(), "%s %q", kind, l)
			b, err := wire.Encode(m)
			require.NoError(t, err)
			_, err = wire.Decode(b)
			require.NoError(t, err, "%s %q", kind, l)
		}
		for name, l := range bad {
			if kind == "Status" && l == "" {
				continue // Status without a lock asks about every lock
			}
			m := mk(l)
			require.Error(t, m.Validate(), "%s: %s", kind, name)
			require.Error(t, wire.CheckLockName(l), name)
			// Encode does not validate, but whatever it produces, Decode refuses.
			if b, err := wire.Encode(m); err == nil {
				_, err = wire.Decode(b)
				require.Error(t, err, "%s: %s decoded", kind, name)
			}
		}
	}

	require.NoError(t, (&wire.Message{Status: &wire.Status{Req: 1}}).Validate())

	nonce := func(n int) *wire.Message {
		return &wire.Message{Challenge: &wire.Challenge{Server: 1, Nonce: make([]byte, n)}}
	}
	require.NoError(t, nonce(wire.NonceSize).Validate())
	for _, n := range []int{0, 1, wire.NonceSize - 1, wire.NonceSize + 1, 1024} {
		require.Error(t, nonce(n).Validate(), "nonce of %d bytes", n)
	}
	require.Error(t, (&wire.Message{Challenge: &wire.Challenge{}}).Validate(), "nil nonce")

	detail := func(n int) *wire.Message {
		return &wire.Message{Error: &wire.Error{Req: 1, Code: wire.ErrCodeRejected, Detail: strings.Repeat("d", n)}}
	}
	require.NoError(t, detail(0).Validate())
	require.NoError(t, detail(wire.MaxDetail).Validate())
	require.Error(t, detail(wire.MaxDetail+1).Validate())
	b, err := wire.Encode(detail(wire.MaxDetail + 1))
	require.NoError(t, err)
	_, err = wire.Decode(b)
	require.Error(t, err)

	f := fx(t)
	a := f.stmt(t, f.alice, wire.PhaseDoorway, 1, 1, 0, nil)
	for _, k := range []wire.EvidenceKind{0, 3, 255} {
		m := &wire.Message{Evidence: &wire.Evidence{Kind: k, A: a}}
		require.Error(t, m.Validate(), "evidence kind %d", k)
		b, err := wire.Encode(m)
		require.NoError(t, err)
		_, err = wire.Decode(b)
		require.ErrorContains(t, err, "unknown evidence kind")
	}
	for _, k := range []wire.EvidenceKind{wire.EvidenceInvalidTicket, wire.EvidenceEquivocation} {
		require.NoError(t, (&wire.Message{Evidence: &wire.Evidence{Kind: k, A: a}}).Validate())
	}

	// A Hello must carry a well-formed key; a Submit or Forward a non-empty statement.
	require.Error(t, (&wire.Message{Hello: &wire.Hello{Key: crypto.PublicKey{Scheme: "RSA", Key: []byte{1}}}}).Validate())
	require.Error(t, (&wire.Message{Hello: &wire.Hello{Key: crypto.PublicKey{Scheme: crypto.Ed25519, Key: []byte{1}}}}).Validate())
	require.Error(t, (&wire.Message{Submit: &wire.Submit{Req: 1}}).Validate())
	require.Error(t, (&wire.Message{Submit: &wire.Submit{Statement: wire.SignedStatement{Signed: crypto.Signed{Body: []byte{1}}}}}).Validate())
	require.Error(t, (&wire.Message{Submit: &wire.Submit{Statement: wire.SignedStatement{Signed: crypto.Signed{Sig: []byte{1}}}}}).Validate())
	require.Error(t, (&wire.Message{Forward: &wire.Forward{}}).Validate())

	// An Announce is bounded and names valid locks: a faulty server cannot
	// make a correct one ask for (or answer) more than MaxAnnounceItems at once.
	ref := wire.StatementRef{Lock: "L"}
	require.Error(t, (&wire.Message{Announce: &wire.Announce{Items: []wire.StatementRef{{}}}}).Validate(), "an empty lock name")
	full := make([]wire.StatementRef, wire.MaxAnnounceItems)
	for i := range full {
		full[i] = ref
	}
	require.NoError(t, (&wire.Message{Announce: &wire.Announce{Items: full}}).Validate())
	require.ErrorContains(t, (&wire.Message{Announce: &wire.Announce{Want: true, Items: append(full, ref)}}).Validate(), "exceeds")
}

// Phase, SuspectReason, EvidenceKind and ErrorCode are small integers on the
// wire: values that do not fit are refused by the decoder, not truncated.
func TestDecodeRefusesOverflow(t *testing.T) {
	for name, h := range map[string]string{
		"ServerID 65536 in Challenge": "a1 01 a2 01 1a 00 01 00 00 02 58 20" + strings.Repeat("00", 32),
		"ErrorCode 65536":             "a1 10 a2 01 01 02 1a 00 01 00 00",
		"EvidenceKind 257":            "a1 14 a1 01 19 01 01",
		"TTL 2^32":                    "a1 04 a2 01 01 02 1b 00 00 00 01 00 00 00 00",
		"negative Req":                "a1 0a a1 01 20",
	} {
		_, err := wire.Decode(unhex(t, h))
		require.Error(t, err, name)
	}
}

// A hand-made, valid frame decodes to exactly what it says, so the encoding
// of the union is pinned (changing a key number is a protocol change).
func TestFrameLayout(t *testing.T) {
	m, err := wire.Decode(unhex(t, "a1 06 a3 01 03 02 11 03 f5"))
	require.NoError(t, err)
	require.Equal(t, &wire.Message{SessionAck: &wire.SessionAck{Session: 3, Seq: 17, LeaseOK: true}}, m)
	b, err := wire.Encode(m)
	require.NoError(t, err)
	require.Equal(t, unhex(t, "a1 06 a3 01 03 02 11 03 f5"), b)

	// Field numbers of the union, in order.
	keys := map[string]int{}
	ty := reflect.TypeFor[wire.Message]()
	for i := 0; i < ty.NumField(); i++ {
		tag := ty.Field(i).Tag.Get("cbor")
		var k int
		for _, c := range tag[:strings.Index(tag, ",")] {
			k = k*10 + int(c-'0')
		}
		keys[ty.Field(i).Name] = k
	}
	names := messageKinds()
	sort.Slice(names, func(i, j int) bool { return keys[names[i]] < keys[names[j]] })
	for i, n := range names {
		require.Equal(t, i+1, keys[n], "%s", n)
	}
}

// The fixed-size ids encode exactly as the CBOR library encodes a byte string.
func TestFixedIDsEncodeAsByteStrings(t *testing.T) {
	var c wire.ClientID
	var k wire.ClusterID
	var d wire.Digest
	for i := range 32 {
		c[i], k[i], d[i] = byte(i), byte(255-i), byte(7*i)
	}
	for _, v := range []interface {
		MarshalCBOR() ([]byte, error)
	}{c, k, d} {
		got, err := v.MarshalCBOR()
		require.NoError(t, err)
		var raw []byte
		require.NoError(t, crypto.Unmarshal(got, &raw))
		want, err := crypto.Marshal(raw)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

// docs/protocol.md §1, "Versions": a minor version may add fields to unsigned
// messages and new message kinds; an older decoder ignores the one and skips
// the other (ErrUnknownKind, not bad input). A signed body stays exact: a
// field the decoder does not know makes it fail verification, so nobody can
// mint byte-different copies of one statement.
func TestMinorVersionsAreIgnoredWhereTheSpecAllows(t *testing.T) {
	// Heartbeat{1: 1, 2: 2} plus a field 9 a newer minor version added.
	m, err := wire.Decode(unhex(t, "a1 05 a3 01 01 02 02 09 63 6e 65 77"))
	require.NoError(t, err)
	require.Equal(t, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 2}}, m)
	// An Ack beside a kind this version does not know: the Ack is read.
	m, err = wire.Decode(unhex(t, "a2 0a a1 01 01 18 c8 a0"))
	require.NoError(t, err)
	require.Equal(t, &wire.Message{Ack: &wire.Ack{Req: 1}}, m)
	// Only an unknown kind: skipped, not malformed.
	_, err = wire.Decode(unhex(t, "a1 18 c8 a1 01 01"))
	require.ErrorIs(t, err, wire.ErrUnknownKind)

	// A signed statement whose body carries an unknown field is refused.
	k, err := crypto.GenerateKey(crypto.Ed25519, crand.Reader)
	require.NoError(t, err)
	keys := wire.NewKeyring(0, []*crypto.Parsed{k.Public})
	st := &wire.Statement{Lock: "L", Client: wire.ClientID(k.Public.ID), Session: 1, Attempt: 1, Phase: wire.PhaseDoorway, Cluster: keys.Cluster}
	body, err := crypto.Marshal(st)
	require.NoError(t, err)
	require.Equal(t, byte(0xa0), body[0]&0xe0, "a map")
	extended := append([]byte{body[0] + 1}, body[1:]...)
	extended = append(extended, 0x18, 0x63, 0x01) // key 99: 1
	ss := wire.SignedStatement{Key: k.Public.Wire, Signed: crypto.Signed{Body: extended, Sig: k.Sign(crypto.DomainStatement, extended)}}
	_, err = ss.Verify(keys.Cluster)
	require.Error(t, err)
	ok := wire.SignedStatement{Key: k.Public.Wire, Signed: crypto.Signed{Body: body, Sig: k.Sign(crypto.DomainStatement, body)}}
	_, err = ok.Verify(keys.Cluster)
	require.NoError(t, err, "the same statement without the field verifies")
}
