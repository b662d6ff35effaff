package mutation

import "testing"

func TestEnableRestore(t *testing.T) {
	for _, m := range All() {
		if On(m) {
			t.Fatalf("%s is on by default", m)
		}
		p, err := Parse(m.String())
		if err != nil || p != m {
			t.Fatalf("Parse(%q) = %v, %v", m.String(), p, err)
		}
	}
	restore := Enable(DropHighWater)
	if !On(DropHighWater) || On(SkipTicketRule) {
		t.Fatal("Enable switched on the wrong mutations")
	}
	inner := Enable(SkipTicketRule)
	if !On(DropHighWater) || !On(SkipTicketRule) {
		t.Fatal("a second Enable cleared the first")
	}
	inner()
	restore()
	for _, m := range All() {
		if On(m) {
			t.Fatalf("%s is still on after restore", m)
		}
	}
}
