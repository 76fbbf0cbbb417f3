package status

import (
	"encoding/json"
	"testing"

	"dsspmesh/shardapi"
)

// The fault checkers read history files of earlier runs too: a push keeps
// its JSON keys.
func TestHistoryPushJSON(t *testing.T) {
	p := HistoryPush{PushID: shardapi.PushID{Worker: "n1", Iter: 7}, RecvNanos: 5, Applied: true, Gap: 2}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"w":"n1","i":7,"rt":5,"a":true,"g":2}`; string(b) != want {
		t.Errorf("HistoryPush encodes as %s, want %s", b, want)
	}
	var back HistoryPush
	if err := json.Unmarshal(b, &back); err != nil || back.PushID != p.PushID {
		t.Errorf("decoded %+v, %v", back, err)
	}
}
