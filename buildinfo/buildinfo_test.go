package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestCurrent(t *testing.T) {
	old := Read
	defer func() { Read = old }()
	Read = func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.time", Value: "2026-11-30T00:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	want := Info{Version: "v1.2.3", Revision: "abc", Time: "2026-11-30T00:00:00Z", Modified: true, Go: "go1.26.8"}
	if got := Current(); got != want {
		t.Fatalf("Current() = %+v, want %+v", got, want)
	}
	Read = func() (*debug.BuildInfo, bool) { return nil, false }
	if got := Current(); got != (Info{Version: "unknown", Go: "unknown"}) {
		t.Fatalf("without build info: %+v", got)
	}
}
