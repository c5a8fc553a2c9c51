package forward

import (
	"fmt"
	"net/http"
	"strconv"
)

// A node hosts one Raft group per cluster.Node (cluster/DESIGN.md, "One Raft
// port, several groups"), so a follower's forwarded checks name the group
// they are for (groupHeader, on the check stream's Upgrade and on every
// POST), and a leader of another group refuses them before deciding
// anything: a check decided in the wrong group's log would be counted where
// its key does not live. No header is group 0, as every earlier build
// sends, so a rolling upgrade keeps forwarding.
const groupHeader = "X-Limitd-Group"

func setGroup(h http.Header, g uint32) {
	if g != 0 {
		h.Set(groupHeader, strconv.FormatUint(uint64(g), 10))
	}
}

// sameGroup reports whether r is for this server's group; otherwise it
// answers bad_request (nothing proposed) and counts the refusal.
func (sv *Server) sameGroup(w http.ResponseWriter, r *http.Request) bool {
	v := r.Header.Get(groupHeader)
	if v == "" && sv.cfg.Group == 0 {
		return true
	}
	g, err := strconv.ParseUint(v, 10, 32)
	if v != "" && err == nil && strconv.FormatUint(g, 10) == v && uint32(g) == sv.cfg.Group {
		return true
	}
	sv.wrongGroup.Add(1)
	writeOutcome(w, outcomeBadRequest, fmt.Sprintf("a forwarded check for group %.16q reached a node of group %d", v, sv.cfg.Group))
	return false
}

// WrongGroup counts the forwarded checks refused because they named another
// group than this node's.
func (sv *Server) WrongGroup() uint64 { return sv.wrongGroup.Load() }
