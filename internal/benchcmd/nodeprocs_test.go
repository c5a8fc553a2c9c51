package benchcmd

import "testing"

func TestNodeProcs(t *testing.T) {
	for _, c := range []struct{ flag, n, cpus, want int }{
		{0, 3, 2, 1},  // a share of 2 CPUs, at least 1
		{0, 3, 8, 2},  // 8 / 3
		{0, 1, 2, 2},  // one node: the whole machine
		{0, 2, 16, 8}, // 16 / 2
		{4, 3, 2, 4},  // as given
		{-1, 3, 2, 0}, // Go's default
		{0, 0, 2, 0},  // no cluster
	} {
		if got := nodeProcs(c.flag, c.n, c.cpus); got != c.want {
			t.Errorf("nodeProcs(%d, %d nodes, %d CPUs) = %d, want %d", c.flag, c.n, c.cpus, got, c.want)
		}
	}
}
