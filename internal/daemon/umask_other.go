//go:build !unix

package daemon

func restrictUmask() {}
