package flagerr

import (
	"flag"
	"testing"
	"time"
)

func testSet() *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("data-dir", "", "")
	fs.String("http-addr", "", "")
	fs.String("raft-addr", "", "")
	fs.Duration("apply-timeout", time.Second, "")
	fs.Bool("pprof", false, "")
	fs.Int("max-batch", 0, "")
	fs.String("tls", "", "")
	return fs
}

func TestParseDescribes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--data-dri", "x"}, "unknown flag --data-dri (did you mean --data-dir?)"},
		{[]string{"--datadir", "x"}, "unknown flag --datadir (did you mean --data-dir?)"},
		{[]string{"--http", "x"}, "unknown flag --http (did you mean --http-addr?)"},
		{[]string{"--bogus"}, "unknown flag --bogus"},
		{[]string{"--ttl"}, "unknown flag --ttl"},
		{[]string{"--apply-timeout", "60"}, `invalid duration "60" for --apply-timeout (want e.g. 60s, 1h30m or 500ms)`},
		{[]string{"--pprof=maybe"}, `invalid value "maybe" for --pprof (want true or false)`},
		{[]string{"--max-batch", "lots"}, `invalid number "lots" for --max-batch`},
		{[]string{"--http-addr"}, "--http-addr needs a value"},
	} {
		err := Parse(testSet(), tc.args)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if err := Parse(testSet(), []string{"--help"}); err != flag.ErrHelp {
		t.Errorf("--help: %v", err)
	}
}
