package daemon

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	l, err := newLogger(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "k", "v")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "shown" || rec["level"] != "WARN" || rec["k"] != "v" {
		t.Fatalf("json at warn: %q (%v)", buf.String(), err)
	}
	for _, bad := range [][2]string{{"xml", "info"}, {"text", "trace"}, {"text", "verbose"}} {
		if _, err := newLogger(&buf, bad[0], bad[1]); err == nil {
			t.Errorf("--log-format %s --log-level %s accepted", bad[0], bad[1])
		}
	}
}
