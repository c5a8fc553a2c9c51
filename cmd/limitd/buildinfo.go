package main

import "runtime/debug"

// buildVersion returns the module version, VCS revision (with "+modified"
// for a build from a changed tree) and Go version the binary was built
// with, "unknown" where the build did not record them. (The version command
// of another branch reads the same build information; the integrator may
// fold this into its helper.)
func buildVersion() (version, revision, goVersion string) {
	version, revision, goVersion = "unknown", "unknown", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	goVersion = bi.GoVersion
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && revision != "unknown" {
		revision += "+modified"
	}
	return
}
