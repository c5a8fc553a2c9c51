// Package buildinfo owns what a limitd binary says about itself: the module
// version, the VCS revision and commit time the Go toolchain embedded, and
// the Go version. `limitd version`, the start-up log line and the
// limitd_build_info metric all read it here, so they always agree.
package buildinfo

import "runtime/debug"

// Info describes the running binary.
type Info struct {
	Version  string `json:"version"`            // module version, "(devel)" for a source build
	Revision string `json:"revision,omitempty"` // VCS revision
	Time     string `json:"time,omitempty"`     // VCS commit time
	Modified bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	Go       string `json:"go"`
}

// Read is debug.ReadBuildInfo; tests replace it.
var Read = debug.ReadBuildInfo

// Current returns the running binary's Info; fields the build did not record
// are "unknown" (Version, Go) or empty.
func Current() Info {
	v := Info{Version: "unknown", Go: "unknown"}
	bi, ok := Read()
	if !ok {
		return v
	}
	v.Go = bi.GoVersion
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}
