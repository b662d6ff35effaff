package server

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/server/store"
	"github.com/bq-lock/bq/transport"
)

// SettingsFileName is the server settings file `bqserver run` reads from
// the cluster directory when --config is not given, if it exists.
const SettingsFileName = "server.yaml"

// Settings are an operator's choices for one server: lease bounds, the
// max-hold default and limits. Each is one key of the settings file;
// every key is optional and has the default SettingKeys documents.
type Settings struct {
	// set holds the keys the file gave, by name.
	set map[string]setting
}

type setting struct {
	key   *SettingKey
	value any // time.Duration, int or float64, by key.Kind
}

// SettingKind is the type of a setting's value.
type SettingKind uint8

// The kinds of setting.
const (
	KindDuration SettingKind = iota + 1 // 30s, 5m, 1h30m; 0 where zero means none
	KindCount                           // a whole number ≥ 1
	KindRate                            // a number > 0, per second
	KindBytes                           // a size: 262144, 256KiB, 16MiB, 1GiB
)

// SettingKey is one key of the settings file.
type SettingKey struct {
	Name    string
	Kind    SettingKind
	Default string
	Doc     string
	// ZeroOK: 0 is allowed (and means none).
	ZeroOK bool
	// core or limits puts a value where it acts.
	core   func(v any, c *core.Config)
	limits func(v any, l *transport.Limits)
	store  func(v any, o *store.Options)
	// min and max bound a KindBytes value.
	min, max int
}

// SettingKeys is every key of the settings file, in the order the
// documentation gives them (bqserver settings prints it).
var SettingKeys = []*SettingKey{
	{Name: "default_ttl", Kind: KindDuration, Default: "10s",
		Doc:  "lease of a session this server learns of without its SessionOpen (from a peer, or its disk after a restart)",
		core: func(v any, c *core.Config) { c.DefaultTTL = v.(time.Duration) }},
	{Name: "min_ttl", Kind: KindDuration, Default: "100ms",
		Doc:  "shortest lease TTL a client may ask for (bqclient --ttl); a shorter one is refused with this bound",
		core: func(v any, c *core.Config) { c.MinTTL = v.(time.Duration) }},
	{Name: "max_ttl", Kind: KindDuration, Default: "5m",
		Doc:  "longest lease TTL a client may ask for: how long a silent holder can keep a lock",
		core: func(v any, c *core.Config) { c.MaxTTL = v.(time.Duration) }},
	{Name: "doorway_deadline", Kind: KindDuration, Default: "10s",
		Doc:  "how long a client may take to choose its ticket (and to say Held once its ticket is least) before its session is refused",
		core: func(v any, c *core.Config) { c.DoorwayDeadline = v.(time.Duration) }},
	{Name: "max_hold", Kind: KindDuration, Default: "0", ZeroOK: true,
		Doc:  "longest a client may hold a lock when its certificate names no max-hold; 0: no bound",
		core: func(v any, c *core.Config) { c.MaxHold = v.(time.Duration) }},
	{Name: "max_sessions_per_client", Kind: KindCount, Default: "4",
		Doc:  "live sessions of one identity",
		core: func(v any, c *core.Config) { c.MaxSessionsPerClient = v.(int) }},
	{Name: "max_locks_per_client", Kind: KindCount, Default: "1024",
		Doc:  "locks one identity uses at once (waiting, holding, or listening)",
		core: func(v any, c *core.Config) { c.MaxLocksPerClient = v.(int) }},
	{Name: "max_listen_members", Kind: KindCount, Default: "4096",
		Doc:  "members one LISTEN may wait for; lowered like max_lock_members",
		core: func(v any, c *core.Config) { c.MaxListenMembers = v.(int) }},
	{Name: "max_deferred_sessions", Kind: KindCount, Default: "64",
		Doc:  "sessions of one identity that ran out while an older one (a detached holding) lives, their votes waiting",
		core: func(v any, c *core.Config) { c.MaxDeferredSessions = v.(int) }},
	{Name: "client_rate", Kind: KindRate, Default: "1000",
		Doc:  "requests per second of one identity (heartbeats and session opens aside); more are refused with when to retry",
		core: func(v any, c *core.Config) { c.ClientRate = v.(float64) }},
	{Name: "client_burst", Kind: KindCount, Default: "2000",
		Doc:  "requests one identity may send at once above client_rate",
		core: func(v any, c *core.Config) { c.ClientBurst = v.(int) }},
	{Name: "new_locks_per_minute", Kind: KindCount, Default: "600",
		Doc:  "lock names one identity may start using per minute (a tenth of it, at least 10, at once)",
		core: func(v any, c *core.Config) { c.NewLocksPerMinute = v.(int) }},
	{Name: "max_locks", Kind: KindCount, Default: "100000",
		Doc:  "locks in use at this server, all identities together (a lock kept only for its fencing high-water mark does not count)",
		core: func(v any, c *core.Config) { c.MaxLocks = v.(int) }},
	{Name: "max_lock_members", Kind: KindCount, Default: "1024",
		Doc:  "clients waiting for or holding one lock; lowered to what one message can carry (969 for Ed25519, 233 to 541 for the post-quantum schemes); a client past it is refused, never stalled",
		core: func(v any, c *core.Config) { c.MaxLockMembers = v.(int) }},
	{Name: "max_state_bytes", Kind: KindCount, Default: "1073741824",
		Doc:  "bytes of live state (registers and ticket justifications) this server holds, all clients together; past it no new register is made, a client's own is always replaced",
		core: func(v any, c *core.Config) { c.MaxStateBytes = v.(int) }},
	{Name: "max_bans", Kind: KindCount, Default: "65536",
		Doc:  "bans kept of clients this server knows only from other servers' evidence (a faulty server can make up identities to ban)",
		core: func(v any, c *core.Config) { c.MaxBans = v.(int) }},
	{Name: "max_pushes", Kind: KindCount, Default: "256",
		Doc:  "pushes one subscription gets before it ends (T, docs/protocol.md §3)",
		core: func(v any, c *core.Config) { c.MaxPushes = v.(int) }},
	{Name: "wal_size", Kind: KindBytes, Default: "16MiB", min: store.MinWALSize, max: store.MaxWALSize,
		Doc:   "size of the write-ahead log beside the server's database (bq.db.wal), allocated in full when the server starts: what it can still acknowledge once its disk is full",
		store: func(v any, o *store.Options) { o.WALSize = v.(int) }},
	{Name: "scrub_rate", Kind: KindBytes, Default: "4MiB", ZeroOK: true, min: 0, max: 1 << 30,
		Doc: "bytes of stored values a second the background scrub reads, checking each one's tag, so that a disk that rots is found before a restart needs the data (docs/protocol.md change 69); 0 turns it off"},
	{Name: "scrub_interval", Kind: KindDuration, Default: "1m",
		Doc: "shortest time from the start of one scrub pass over the whole store to the start of the next"},
	{Name: "max_client_connections", Kind: KindCount, Default: "1024",
		Doc:    "client connections held at once, in handshake or bound",
		limits: func(v any, l *transport.Limits) { l.MaxClientConns = v.(int) }},
	{Name: "accept_rate", Kind: KindRate, Default: "200",
		Doc:    "new connections per second this server starts to handshake; more are refused before any TLS work",
		limits: func(v any, l *transport.Limits) { l.AcceptRate = v.(float64) }},
	{Name: "accept_burst", Kind: KindCount, Default: "100",
		Doc:    "new connections accepted at once above accept_rate",
		limits: func(v any, l *transport.Limits) { l.AcceptBurst = v.(int) }},
	{Name: "accept_rate_per_address", Kind: KindRate, Default: "100",
		Doc:    "new connections per second from one source address",
		limits: func(v any, l *transport.Limits) { l.AcceptRatePerAddress = v.(float64) }},
	{Name: "accept_burst_per_address", Kind: KindCount, Default: "200",
		Doc:    "new connections one source address may start at once above accept_rate_per_address",
		limits: func(v any, l *transport.Limits) { l.AcceptBurstPerAddress = v.(int) }},
	{Name: "handshake_timeout", Kind: KindDuration, Default: "10s",
		Doc:    "longest a connection may take to present its Hello",
		limits: func(v any, l *transport.Limits) { l.HandshakeTimeout = v.(time.Duration) }},
	{Name: "idle_timeout", Kind: KindDuration, Default: "30s",
		Doc:    "a connection that is silent this long is closed",
		limits: func(v any, l *transport.Limits) { l.IdleTimeout = v.(time.Duration) }},
}

// LoadSettings reads a settings file. It reports every problem, one error
// per problem, each naming the file, the line and the key.
func LoadSettings(path string) (*Settings, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("server settings: %w", err)
	}
	return ParseSettings(path, b)
}

// ParseSettings parses the settings file named name.
func ParseSettings(name string, b []byte) (*Settings, error) {
	s := &Settings{set: make(map[string]setting)}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: not YAML: %w", name, err)
	}
	if len(doc.Content) == 0 {
		return s, nil // an empty file: every default
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of key: value, one per line", name, root.Line)
	}
	var errs []error
	bad := func(n *yaml.Node, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", name, n.Line, fmt.Sprintf(format, args...)))
	}
	seen := make(map[string]int) // key → the line that gave it
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, vn := root.Content[i], root.Content[i+1]
		key := keyNamed(kn.Value)
		switch {
		case key == nil:
			bad(kn, "unknown key %q%s", kn.Value, suggest(kn.Value))
			continue
		case seen[key.Name] != 0:
			bad(kn, "%s is given twice (first on line %d)", key.Name, seen[key.Name])
			continue
		}
		seen[key.Name] = kn.Line
		if vn.Kind != yaml.ScalarNode {
			bad(vn, "%s: want a single value, e.g. %s", key.Name, key.Default)
			continue
		}
		v, err := key.parse(vn.Value)
		if err != nil {
			bad(vn, "%s: %v", key.Name, err)
			continue
		}
		s.set[key.Name] = setting{key: key, value: v}
	}
	if err := s.check(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

func keyNamed(name string) *SettingKey {
	for _, k := range SettingKeys {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// suggest names a key close to a misspelt one.
func suggest(name string) string {
	norm := func(s string) string {
		return strings.NewReplacer("-", "", "_", "", " ", "").Replace(strings.ToLower(s))
	}
	for _, k := range SettingKeys {
		if n := norm(name); n != "" && (n == norm(k.Name) || strings.Contains(norm(k.Name), n) || strings.Contains(n, norm(k.Name))) {
			return fmt.Sprintf(" (did you mean %s?)", k.Name)
		}
	}
	return " (bqserver settings lists every key)"
}

func (k *SettingKey) parse(text string) (any, error) {
	switch k.Kind {
	case KindDuration:
		if text == "0" && k.ZeroOK {
			return time.Duration(0), nil
		}
		d, err := time.ParseDuration(text)
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (e.g. 500ms, 30s, 5m)", text)
		}
		if d < 0 || (d == 0 && !k.ZeroOK) {
			return nil, fmt.Errorf("%s must be above zero", text)
		}
		return d, nil
	case KindCount:
		n, err := strconv.Atoi(text)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a whole number ≥ 1", text)
		}
		return n, nil
	case KindBytes:
		if text == "0" && k.ZeroOK {
			return 0, nil
		}
		return parseBytes(text, k.min, k.max)
	default:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil || !(f > 0) || f > 1e9 {
			return nil, fmt.Errorf("%q is not a number above zero (per second)", text)
		}
		return f, nil
	}
}

// parseBytes reads a size in bytes, with an optional KiB, MiB or GiB
// suffix, within [lo, hi].
func parseBytes(text string, lo, hi int) (int, error) {
	num, unit := text, 1
	for _, u := range []struct {
		suffix string
		n      int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(text, u.suffix) {
			num, unit = strings.TrimSpace(strings.TrimSuffix(text, u.suffix)), u.n
			break
		}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > hi/unit+1 {
		return 0, fmt.Errorf("%q is not a size (e.g. 262144, 256KiB, 16MiB, 1GiB)", text)
	}
	if n *= unit; n < lo || n > hi {
		return 0, fmt.Errorf("%s is outside [%s, %s]", text, sizeString(lo), sizeString(hi))
	}
	return n, nil
}

// sizeString writes a size with the largest unit that divides it.
func sizeString(n int) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.Itoa(n)
}

// value is key's value: the file's, or its default.
func (s *Settings) value(name string) any {
	if st, ok := s.set[name]; ok {
		return st.value
	}
	k := keyNamed(name)
	v, err := k.parse(k.Default)
	if err != nil {
		panic(fmt.Sprintf("server: the default of %s does not parse: %v", name, err))
	}
	return v
}

// ScrubRate is scrub_rate: bytes of stored values a second the background
// scrub reads (0: none).
func (s *Settings) ScrubRate() int {
	if s == nil {
		return (&Settings{}).value("scrub_rate").(int)
	}
	return s.value("scrub_rate").(int)
}

// ScrubInterval is scrub_interval: the shortest time between the starts of
// two scrub passes.
func (s *Settings) ScrubInterval() time.Duration {
	if s == nil {
		return (&Settings{}).value("scrub_interval").(time.Duration)
	}
	return s.value("scrub_interval").(time.Duration)
}

// check reports the problems between keys.
func (s *Settings) check() error {
	var errs []error
	lo, def, hi := s.value("min_ttl").(time.Duration), s.value("default_ttl").(time.Duration), s.value("max_ttl").(time.Duration)
	if lo > def || def > hi {
		errs = append(errs, fmt.Errorf("want min_ttl ≤ default_ttl ≤ max_ttl, have %v ≤ %v ≤ %v", lo, def, hi))
	}
	return errors.Join(errs...)
}

// ApplyCore puts the keys the file set into a core's configuration; the
// others keep core.DefaultConfig's values, which are the documented
// defaults (TestSettingsDefaultsAreTheCodes). A nil Settings changes nothing.
func (s *Settings) ApplyCore(c *core.Config) {
	if s == nil {
		return
	}
	for _, k := range SettingKeys {
		if st, ok := s.set[k.Name]; ok && k.core != nil {
			k.core(st.value, c)
		}
	}
}

// ApplyLimits puts the keys the file set into the transport's limits.
func (s *Settings) ApplyLimits(l *transport.Limits) {
	if s == nil {
		return
	}
	for _, k := range SettingKeys {
		if st, ok := s.set[k.Name]; ok && k.limits != nil {
			k.limits(st.value, l)
		}
	}
}

// ApplyStore puts the keys the file set into the store's options.
func (s *Settings) ApplyStore(o *store.Options) {
	if s == nil {
		return
	}
	for _, k := range SettingKeys {
		if st, ok := s.set[k.Name]; ok && k.store != nil {
			k.store(st.value, o)
		}
	}
}

// Given lists the keys the file set, with their values, for the log.
func (s *Settings) Given() []any {
	if s == nil {
		return nil
	}
	var out []any
	for _, k := range SettingKeys {
		if st, ok := s.set[k.Name]; ok {
			out = append(out, k.Name, fmt.Sprint(st.value))
		}
	}
	return out
}

// SettingsDoc is a settings file with every key commented out at its
// default, each with its documentation: what `bqserver settings` prints.
func SettingsDoc() string {
	var b strings.Builder
	b.WriteString("# bq server settings. Every key is optional; a missing key has the default shown.\n")
	b.WriteString("# Durations: 500ms, 30s, 5m, 1h30m. bqserver run reads DIR/server.yaml, or --config FILE.\n")
	for _, k := range SettingKeys {
		fmt.Fprintf(&b, "\n# %s\n# %s: %s\n", k.Doc, k.Name, k.Default)
	}
	return b.String()
}
