package e2e

// Tests of the deployment files under deploy/: every flag and LIMITD_
// variable they use exists in `limitd serve`, the systemd unit verifies, the
// Dockerfile's build makes a static binary, the compose file and Kubernetes
// manifests have the structure the docs promise (and the schemas, when the
// validator is installed), and every metric the Grafana dashboard queries
// exists in /metrics.

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/limitd/limitd/internal/daemon"
	"github.com/limitd/limitd/internal/proccluster"
	"github.com/limitd/limitd/internal/testtool"
)

const deployDir = "../deploy"

// deployFiles are the files whose limitd flags the tests check.
var deployFiles = []string{
	"systemd/limitd.service", "systemd/limitd.env", "docker/Dockerfile",
	"docker/compose.yaml", "kubernetes/limitd.yaml",
}

// notLimitdFlags are options in the deploy files that belong to other
// programs, each with its owner.
var notLimitdFlags = map[string]string{
	"no-check-certificate": "wget (health check, peer probe)",
	"from":                 "Dockerfile COPY --from",
	"interval":             "Dockerfile HEALTHCHECK", "timeout": "Dockerfile HEALTHCHECK",
	"start-period": "Dockerfile HEALTHCHECK", "retries": "Dockerfile HEALTHCHECK",
}

var flagRE = regexp.MustCompile(`(?:^|[\s"'\[])--([a-z][a-z0-9-]*)`)
var envRE = regexp.MustCompile(`\bLIMITD_([A-Z0-9_]+)`)

// serveFlagNames are the flags `limitd serve --help` lists.
func serveFlagNames() map[string]bool {
	fs := daemon.FlagSet(io.Discard)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

// parseServe parses args with serve's flags and returns every flag's value
// by name (a list's values comma-separated).
func parseServe(args []string) (map[string]string, error) {
	fs := daemon.FlagSet(io.Discard)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	v := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { v[f.Name] = f.Value.String() })
	return v, nil
}

// deployUses returns the limitd flags each deploy file uses, on the command
// line (--name) or as LIMITD_NAME, outside comments.
func deployUses(t *testing.T) map[string][]string {
	t.Helper()
	uses := map[string][]string{}
	for _, f := range deployFiles {
		b, err := os.ReadFile(filepath.Join(deployDir, f))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, m := range flagRE.FindAllStringSubmatch(line, -1) {
				if _, other := notLimitdFlags[m[1]]; !other {
					uses[f] = append(uses[f], m[1])
				}
			}
			for _, m := range envRE.FindAllStringSubmatch(line, -1) {
				uses[f] = append(uses[f], strings.ToLower(strings.ReplaceAll(m[1], "_", "-")))
			}
		}
	}
	return uses
}

func TestDeployFlagsExist(t *testing.T) {
	have := serveFlagNames()
	uses := deployUses(t)
	total := 0
	for f, names := range uses {
		for _, n := range names {
			total++
			if !have[n] {
				t.Errorf("%s uses --%s (or LIMITD_%s), which limitd serve does not have", f, n, strings.ToUpper(strings.ReplaceAll(n, "-", "_")))
			}
		}
	}
	// The check must see the flags the files are known to use.
	for _, f := range []string{"docker/compose.yaml", "kubernetes/limitd.yaml", "systemd/limitd.service", "docker/Dockerfile"} {
		if len(uses[f]) == 0 {
			t.Errorf("no limitd flags found in %s: the scanner is broken", f)
		}
	}
	if total < 20 {
		t.Errorf("only %d flag uses found in the deploy files", total)
	}
}

func readDeploy(t *testing.T, f string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, f))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSystemdUnit checks the unit's hardening options and, with systemd's
// own tools, that it verifies and that its exposure score is low.
func TestSystemdUnit(t *testing.T) {
	unit := readDeploy(t, "systemd/limitd.service")
	for _, want := range []string{
		"User=limitd", "Group=limitd", "ProtectSystem=strict", "ProtectHome=yes", "NoNewPrivileges=yes",
		"StateDirectory=limitd", "ReadWritePaths=/var/lib/limitd", "\nCapabilityBoundingSet=\n", "PrivateTmp=yes",
		"PrivateDevices=yes", "RestrictAddressFamilies=", "SystemCallFilter=@system-service",
		"--data-dir=/var/lib/limitd", "Restart=on-failure", "KillSignal=SIGTERM",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("limitd.service lacks %q", strings.TrimSpace(want))
		}
	}
	if !strings.Contains(readDeploy(t, "systemd/limitd.sysusers"), "u limitd ") {
		t.Error("limitd.sysusers does not create the limitd user")
	}
	sa := testtool.Path(t, "systemd-analyze", "apt-get install systemd; without it the unit is not verified")
	// The unit as installed, with the binary and environment file of this
	// test (verify checks that the executable exists).
	dir := t.TempDir()
	env := filepath.Join(dir, "limitd.env")
	if err := os.WriteFile(env, []byte(readDeploy(t, "systemd/limitd.env")), 0o600); err != nil {
		t.Fatal(err)
	}
	unit = strings.ReplaceAll(unit, "/usr/local/bin/limitd", limitdBin)
	unit = strings.ReplaceAll(unit, "/etc/limitd/limitd.env", env)
	path := filepath.Join(dir, "limitd.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", "--man=no", path).CombinedOutput()
	// verify exits 0 on unknown keys but warns: any output is a finding.
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(sa, "security", "--offline=yes", "--threshold=20", path).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0 (threshold 20 on its 0-100 scale) or failed: %v\n%s", err, out)
	}
}

// The systemd environment template: gRPC for Envoy on, the same
// --join and --bootstrap-expect on every node (an empty join on the first
// node bootstraps a cluster of one again if it restarts empty), and no
// placeholder token (a node off loopback refuses one).
func TestSystemdEnvTemplate(t *testing.T) {
	env := map[string]string{}
	for _, line := range strings.Split(readDeploy(t, "systemd/limitd.env"), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = v
		}
	}
	if env["LIMITD_GRPC_ADDR"] == "" {
		t.Error("LIMITD_GRPC_ADDR unset: no gRPC listener for Envoy")
	}
	if join := strings.Split(env["LIMITD_JOIN"], ","); env["LIMITD_BOOTSTRAP_EXPECT"] != "3" || len(join) != 3 || join[0] == "" {
		t.Errorf("LIMITD_JOIN %q, LIMITD_BOOTSTRAP_EXPECT %q: want all three members and 3, the same on every node", env["LIMITD_JOIN"], env["LIMITD_BOOTSTRAP_EXPECT"])
	}
	if tok := env["LIMITD_ADMIN_TOKEN"]; tok != "" {
		t.Errorf("LIMITD_ADMIN_TOKEN=%q: the template must not ship a token (every copy would share it)", tok)
	}
}

// dockerInstructions returns the Dockerfile's instructions (continuations
// joined), comments dropped.
func dockerInstructions(t *testing.T) []string {
	var out []string
	cur := ""
	for _, line := range strings.Split(readDeploy(t, "docker/Dockerfile"), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		out = append(out, cur+trimmed)
		cur = ""
	}
	return out
}

// TestDockerfile checks the image's promises (multi-stage, static binary,
// non-root, data volume, health check) and builds the binary as its build
// stage does, checking that it is statically linked. The image itself is
// not built: there is no Docker engine here.
func TestDockerfile(t *testing.T) {
	var froms, builds []string
	var user, volume, health, entry, expose string
	env := map[string]string{}
	for _, in := range dockerInstructions(t) {
		op, rest, _ := strings.Cut(in, " ")
		switch strings.ToUpper(op) {
		case "EXPOSE":
			expose = rest
		case "FROM":
			froms = append(froms, rest)
		case "RUN":
			if strings.Contains(rest, "go build") {
				builds = append(builds, rest)
			}
		case "USER":
			user = rest
		case "VOLUME":
			volume = rest
		case "HEALTHCHECK":
			health = rest
		case "ENTRYPOINT":
			entry = rest
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env[k] = v
				}
			}
		}
	}
	if len(froms) < 2 || !strings.Contains(froms[0], " AS build") {
		t.Errorf("FROM %v: want a build stage and a runtime stage", froms)
	}
	if len(builds) != 1 || !strings.Contains(builds[0], "CGO_ENABLED=0") {
		t.Fatalf("go build steps %v: want one, with CGO_ENABLED=0", builds)
	}
	// The Envoy path: gRPC on by default in the image, and its port exposed.
	if env["LIMITD_GRPC_ADDR"] != "0.0.0.0:8081" || !slices.Contains(strings.Fields(expose), "8081") {
		t.Errorf("LIMITD_GRPC_ADDR %q, EXPOSE %q: want gRPC on 0.0.0.0:8081 and the port exposed", env["LIMITD_GRPC_ADDR"], expose)
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("USER %q: want a non-root user", user)
	}
	if !strings.Contains(volume, env["LIMITD_DATA_DIR"]) || env["LIMITD_DATA_DIR"] == "" {
		t.Errorf("VOLUME %s does not hold LIMITD_DATA_DIR=%s", volume, env["LIMITD_DATA_DIR"])
	}
	if !strings.Contains(health, "CMD") || !strings.Contains(env["HEALTHCHECK_URL"], "/healthz") || !strings.Contains(health, "$HEALTHCHECK_URL") {
		t.Errorf("HEALTHCHECK %q (HEALTHCHECK_URL=%s): want a check of /healthz", health, env["HEALTHCHECK_URL"])
	}
	if !strings.Contains(entry, `"serve"`) {
		t.Errorf("ENTRYPOINT %s: want limitd serve", entry)
	}
	if testing.Short() {
		return
	}
	// The build stage's command, run here from the repository root.
	_, cmdline, _ := strings.Cut(builds[0], "go build ")
	args := shellFields(cmdline)
	out := filepath.Join(t.TempDir(), "limitd")
	for i, a := range args {
		if a == "/out/limitd" {
			args[i] = out
		}
	}
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the Dockerfile's build is not static: the binary has a %v segment", p.Type)
		}
	}
}

// shellFields splits a command line like sh does for words and double
// quotes (enough for the Dockerfile's go build line).
func shellFields(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// TestComposeFile decodes compose.yaml (merge keys and all) and checks the
// 3-node cluster: one node bootstraps, the others join it, each advertises
// the name it is reached at, keeps its data on its own volume and has the
// health check's URL.
func TestComposeFile(t *testing.T) {
	var c struct {
		Services map[string]struct {
			Hostname    string            `yaml:"hostname"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Ports       []string          `yaml:"ports"`
			Networks    []string          `yaml:"networks"`
			Build       struct {
				Context, Dockerfile string
			} `yaml:"build"`
		} `yaml:"services"`
		Volumes  map[string]any `yaml:"volumes"`
		Networks map[string]any `yaml:"networks"`
	}
	if err := yaml.Unmarshal([]byte(readDeploy(t, "docker/compose.yaml")), &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Services) != 3 {
		t.Fatalf("%d services, want 3", len(c.Services))
	}
	bootstraps := 0
	for name, s := range c.Services {
		f, err := parseServe(s.Command)
		if err != nil {
			t.Errorf("%s: command %v: %v", name, s.Command, err)
			continue
		}
		if f["node-id"] != name || s.Hostname != name {
			t.Errorf("%s: node id %q, hostname %q: want the service name", name, f["node-id"], s.Hostname)
		}
		if f["http-advertise"] != name+":8080" || f["raft-advertise"] != name+":8300" {
			t.Errorf("%s: advertises %s and %s, want its name", name, f["http-advertise"], f["raft-advertise"])
		}
		switch {
		case f["join"] == "":
			bootstraps++
		default:
			for _, j := range strings.Split(f["join"], ",") {
				target := strings.TrimSuffix(strings.TrimPrefix(j, "https://"), ":8080")
				if _, ok := c.Services[target]; !ok || target == name {
					t.Errorf("%s joins %s, not another service of the file", name, j)
				}
			}
		}
		if !strings.HasPrefix(f["tls-cert"], "/certs/") || s.Environment["LIMITD_TLS_CA"] == "" || s.Environment["LIMITD_ADMIN_TOKEN"] == "" {
			t.Errorf("%s: want mutual TLS and the admin token (cert %q, env %v)", name, f["tls-cert"], s.Environment)
		}
		vol := name + ":/var/lib/limitd"
		if !contains(s.Volumes, vol) || c.Volumes[name] == nil {
			t.Errorf("%s: volumes %v: want the named volume %s", name, s.Volumes, vol)
		}
		if len(s.Ports) != 2 || !strings.HasPrefix(s.Ports[0], "127.0.0.1:") || !strings.HasPrefix(s.Ports[1], "127.0.0.1:") ||
			!strings.HasSuffix(s.Ports[0], ":8080") || !strings.HasSuffix(s.Ports[1], ":8081") {
			t.Errorf("%s: ports %v: want the HTTP API and gRPC (Envoy's rate limit service) published on loopback only", name, s.Ports)
		}
		if s.Build.Dockerfile != "deploy/docker/Dockerfile" || len(s.Networks) != 1 || c.Networks[s.Networks[0]] == nil {
			t.Errorf("%s: build %+v, networks %v: want the Dockerfile and the file's network", name, s.Build, s.Networks)
		}
	}
	if bootstraps != 1 {
		t.Errorf("%d services bootstrap (no --join), want exactly 1", bootstraps)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// k8sObject is the part of a Kubernetes object the structural test reads.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		// Service
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		RawSelector              map[string]any    `yaml:"selector"`
		Selector                 map[string]string `yaml:"-"` // a Service's
		LabelSelector            struct {
			MatchLabels map[string]string
		} `yaml:"-"` // a PodDisruptionBudget's or StatefulSet's
		MaxUnavailable      *int   `yaml:"maxUnavailable"`
		ServiceName         string `yaml:"serviceName"`
		Replicas            int    `yaml:"replicas"`
		PodManagementPolicy string `yaml:"podManagementPolicy"`
		Template            struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path   string `yaml:"path"`
		Port   string `yaml:"port"`
		Scheme string `yaml:"scheme"`
	} `yaml:"httpGet"`
}

type k8sPodSpec struct {
	TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot bool `yaml:"runAsNonRoot"`
	} `yaml:"securityContext"`
	Containers []struct {
		Name    string   `yaml:"name"`
		Command []string `yaml:"command"`
		Env     []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		ReadinessProbe  k8sProbe `yaml:"readinessProbe"`
		LivenessProbe   k8sProbe `yaml:"livenessProbe"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		} `yaml:"securityContext"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	} `yaml:"containers"`
}

func k8sObjects(t *testing.T) map[string]*k8sObject {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(readDeploy(t, "kubernetes/limitd.yaml")))
	objs := map[string]*k8sObject{}
	for {
		var node yaml.Node
		if err := dec.Decode(&node); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		o := &k8sObject{}
		if err := node.Decode(o); err != nil {
			t.Fatal(err)
		}
		// A Service's selector is a map of labels; a PodDisruptionBudget's
		// and a StatefulSet's has matchLabels.
		labels := func(m map[string]any) map[string]string {
			out := map[string]string{}
			for k, v := range m {
				out[k] = fmt.Sprint(v)
			}
			return out
		}
		if ml, ok := o.Spec.RawSelector["matchLabels"].(map[string]any); ok {
			o.Spec.LabelSelector.MatchLabels = labels(ml)
		} else if o.Spec.RawSelector != nil {
			o.Spec.Selector = labels(o.Spec.RawSelector)
		}
		objs[o.Kind+"/"+o.Metadata.Name] = o
	}
	return objs
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestKubernetesManifests checks how the objects fit together: the
// StatefulSet's pods are named through the headless Service (publishing
// not-ready pods, so a node can join before it is ready), the PDB and the
// Services select its pods, probes use /readyz and /healthz, the pods run
// unprivileged, the data volume is the data directory, and SIGTERM has time
// for the leadership transfer serve does before closing.
func TestKubernetesManifests(t *testing.T) {
	objs := k8sObjects(t)
	sts, pdb, headless, api := objs["StatefulSet/limitd"], objs["PodDisruptionBudget/limitd"], objs["Service/limitd"], objs["Service/limitd-api"]
	if sts == nil || pdb == nil || headless == nil || api == nil {
		t.Fatalf("objects %v: want StatefulSet, PodDisruptionBudget and Services limitd and limitd-api", keys(objs))
	}
	pod := sts.Spec.Template
	if sts.Spec.ServiceName != headless.Metadata.Name || headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("StatefulSet serviceName %q; Service %s clusterIP %q publishNotReadyAddresses %v: want a headless Service publishing not-ready pods",
			sts.Spec.ServiceName, headless.Metadata.Name, headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	if sts.Spec.Replicas != 3 || sts.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("replicas %d, podManagementPolicy %q: want 3, Parallel", sts.Spec.Replicas, sts.Spec.PodManagementPolicy)
	}
	for _, sel := range []map[string]string{sts.Spec.LabelSelector.MatchLabels, pdb.Spec.LabelSelector.MatchLabels, headless.Spec.Selector, api.Spec.Selector} {
		if !subset(sel, pod.Metadata.Labels) {
			t.Errorf("selector %v does not select the pods (labels %v)", sel, pod.Metadata.Labels)
		}
	}
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != 1 {
		got := "unset"
		if pdb.Spec.MaxUnavailable != nil {
			got = fmt.Sprint(*pdb.Spec.MaxUnavailable)
		}
		t.Errorf("PodDisruptionBudget maxUnavailable %s: want 1 (two of three keep the quorum)", got)
	}
	ps := pod.Spec
	if ps.TerminationGracePeriodSeconds < 15 || !ps.SecurityContext.RunAsNonRoot || len(ps.Containers) != 1 {
		t.Fatalf("pod spec: grace %d s, runAsNonRoot %v, %d containers", ps.TerminationGracePeriodSeconds, ps.SecurityContext.RunAsNonRoot, len(ps.Containers))
	}
	c := ps.Containers[0]
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes: readiness %q, liveness %q", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	if c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation || !c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("container: want allowPrivilegeEscalation false and a read-only root file system")
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	dataMounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == env["LIMITD_DATA_DIR"] && len(sts.Spec.VolumeClaimTemplates) == 1 && sts.Spec.VolumeClaimTemplates[0].Metadata.Name == m.Name {
			dataMounted = true
		}
	}
	if !dataMounted {
		t.Errorf("LIMITD_DATA_DIR %q is not the volume claim template's mount", env["LIMITD_DATA_DIR"])
	}
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 8080 || ports["raft"] != 8300 || env["LIMITD_HTTP_ADDR"] != "0.0.0.0:8080" || env["LIMITD_RAFT_ADDR"] != "0.0.0.0:8300" {
		t.Errorf("ports %v and addresses %s, %s disagree", ports, env["LIMITD_HTTP_ADDR"], env["LIMITD_RAFT_ADDR"])
	}
	// The Envoy path: gRPC listens, the pod declares the port, and the
	// client Service carries it.
	if ports["grpc"] != 8081 || env["LIMITD_GRPC_ADDR"] != "0.0.0.0:8081" {
		t.Errorf("grpc port %d and LIMITD_GRPC_ADDR %q: want 8081 on every interface", ports["grpc"], env["LIMITD_GRPC_ADDR"])
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestKubernetesStartScript runs the pod's start script with sh, the
// limitd binary replaced by a recorder and wget by a stub, for pod 0 of a
// new cluster, pod 0 with an empty volume while the others run, a
// restarted pod 0, and pod 2; and parses the flags it passes.
func TestKubernetesStartScript(t *testing.T) {
	sh := testtool.Path(t, "sh", "a POSIX shell")
	c := k8sObjects(t)["StatefulSet/limitd"].Spec.Template.Spec.Containers[0]
	if len(c.Command) != 3 || c.Command[0] != "/bin/sh" {
		t.Fatalf("command %v: want /bin/sh -c SCRIPT", c.Command)
	}
	script := c.Command[2]
	for _, c := range []struct {
		name, pod   string
		dataExists  bool
		peersReady  bool
		wantJoin    string
		wantNoWgets bool
	}{
		{"new cluster, pod 0 bootstraps", "limitd-0", false, false, "", false},
		{"pod 0 with an empty volume joins the running cluster", "limitd-0", false, true, "https://limitd-1.limitd.prod.svc.cluster.local:8080", false},
		{"restarted pod 0 keeps its state", "limitd-0", true, true, "", true},
		{"pod 2 joins pod 0", "limitd-2", false, true, "https://limitd-0.limitd.prod.svc.cluster.local:8080", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			os.MkdirAll(data, 0o700)
			if c.dataExists {
				os.WriteFile(filepath.Join(data, "fsm.db"), nil, 0o600)
			}
			bin := filepath.Join(dir, "bin")
			os.MkdirAll(bin, 0o755)
			args := filepath.Join(dir, "args")
			wgets := filepath.Join(dir, "wgets")
			wgetExit := "1"
			if c.peersReady {
				wgetExit = "0"
			}
			os.WriteFile(filepath.Join(bin, "wget"), []byte("#!/bin/sh\necho \"$@\" >> "+wgets+"\nexit "+wgetExit+"\n"), 0o755)
			os.WriteFile(filepath.Join(bin, "limitd"), []byte("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > "+args+"\n"), 0o755)
			s := strings.ReplaceAll(script, "/usr/local/bin/limitd", filepath.Join(bin, "limitd"))
			s = strings.ReplaceAll(s, "/var/lib/limitd", data)
			cmd := exec.Command(sh, "-c", s)
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "POD_NAME=" + c.pod, "POD_NAMESPACE=prod", "HEADLESS_SERVICE=limitd", "CLUSTER_DOMAIN=cluster.local"}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("script: %v\n%s", err, out)
			}
			b, err := os.ReadFile(args)
			if err != nil {
				t.Fatal(err)
			}
			argv := strings.Split(strings.TrimSpace(string(b)), "\n")
			if argv[0] != "serve" {
				t.Fatalf("limitd %v: want serve", argv)
			}
			f, err := parseServe(argv[1:])
			if err != nil {
				t.Fatalf("flags %v: %v", argv[1:], err)
			}
			self := c.pod + ".limitd.prod.svc.cluster.local"
			if f["node-id"] != c.pod || f["http-advertise"] != self+":8080" || f["raft-advertise"] != self+":8300" {
				t.Errorf("node id %q, advertise %q %q: want the pod's DNS name", f["node-id"], f["http-advertise"], f["raft-advertise"])
			}
			if got := f["join"]; got != c.wantJoin {
				t.Errorf("--join %q, want %q", got, c.wantJoin)
			}
			if _, err := os.Stat(wgets); c.wantNoWgets && err == nil {
				t.Error("probed peers although it had nothing to decide")
			}
		})
	}
}

// TestKubernetesSchemas validates the manifests against Kubernetes' API
// schemas with deploy/kubernetes/validate.mjs (npm kubernetes-models).
func TestKubernetesSchemas(t *testing.T) {
	dir := os.Getenv("LIMITD_K8S_VALIDATE_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "limitd", "k8s-validate")
	}
	node, err := exec.LookPath("node")
	if _, statErr := os.Stat(filepath.Join(dir, "node_modules", "kubernetes-models")); err != nil || statErr != nil {
		testtool.Missing(t, "the Kubernetes schema validator is not installed (node: %v; %s: %v): run deploy/kubernetes/validate.sh --install", err, dir, statErr)
	}
	run := func(files ...string) (string, error) {
		cmd := exec.Command(node, append([]string{filepath.Join(deployDir, "kubernetes", "validate.mjs")}, files...)...)
		cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(filepath.Join(deployDir, "kubernetes", "limitd.yaml")); err != nil {
		t.Fatalf("manifests invalid: %v\n%s", err, out)
	} else if !strings.Contains(out, "4 documents valid, 0 invalid") {
		t.Fatalf("validator: %s", out)
	}
	// The validator does reject a wrong type.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(readDeploy(t, "kubernetes/limitd.yaml"), "replicas: 3", "replicas: three", 1)), 0o644)
	if out, err := run(bad); err == nil || !strings.Contains(out, "replicas") {
		t.Fatalf("a StatefulSet with replicas: three passed: %v\n%s", err, out)
	}
}

// dashboardMetrics returns the metric names each panel of the Grafana
// dashboard queries.
func dashboardMetrics(t *testing.T) map[string][]string {
	t.Helper()
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(readDeploy(t, "grafana/limitd.json")), &d); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], promQLMetrics(tg.Expr)...)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			out["variable"] = append(out["variable"], promQLMetrics(fmt.Sprint(q["query"]))...)
		}
	}
	return out
}

// promQLMetrics finds the metric names in a PromQL expression: identifiers
// with a limitd_, go_ or process_ prefix outside label matchers ({...}),
// strings and Grafana variables ($name).
func promQLMetrics(expr string) []string {
	var names []string
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '{':
			for i < len(expr) && expr[i] != '}' {
				if expr[i] == '"' { // a value may hold '}'
					i++
					for i < len(expr) && expr[i] != '"' {
						i++
					}
				}
				i++
			}
			i++
		case c == '$':
			i++
			for i < len(expr) && (isIdent(expr[i], false) || expr[i] == '{') {
				i++
			}
		case isIdent(c, true):
			j := i
			for j < len(expr) && isIdent(expr[j], false) {
				j++
			}
			id := expr[i:j]
			for _, p := range []string{"limitd_", "go_", "process_"} {
				if strings.HasPrefix(id, p) {
					names = append(names, id)
				}
			}
			i = j
		default:
			i++
		}
	}
	return names
}

func TestPromQLMetrics(t *testing.T) {
	got := promQLMetrics(`histogram_quantile(0.99, sum by (le, instance) (rate(limitd_raft_commit_seconds_bucket{instance=~"$instance", x="limitd_not_a_metric}"}[$__rate_interval]))) / go_goroutines + process_open_fds{a="b"}`)
	want := []string{"limitd_raft_commit_seconds_bucket", "go_goroutines", "process_open_fds"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("promQLMetrics = %v, want %v", got, want)
	}
}

// exposedNames are the sample names in a /metrics answer (histograms'
// _bucket, _sum and _count included).
func exposedNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// TestDashboardMetricsExist runs a 3-node cluster of real processes, sends
// checks (allowed and refused, a replay, an error), and checks that every
// metric the dashboard queries is in /metrics of the leader and of a
// follower.
func TestDashboardMetricsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	used := dashboardMetrics(t)
	if len(used) < 20 {
		t.Fatalf("only %d panels with metrics found in the dashboard", len(used))
	}
	old := proccluster.Serve
	proccluster.Serve = func() (string, []string, error) { return limitdBin, []string{"serve"}, nil }
	defer func() { proccluster.Serve = old }()
	c, err := proccluster.Start(context.Background(), t.TempDir(), []string{"n1", "n2", "n3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	for i := 0; i < 5; i++ {
		for _, nd := range c.Nodes {
			postJSON(t, nd.URL("/v1/check"), `{"key":"dash","limit":{"algorithm":"fixed_window","limit":3,"window":"60s"}}`)
		}
	}
	postJSON(t, c.Nodes[0].URL("/v1/check"), `{"key":"r","limit":{"algorithm":"fixed_window","limit":3,"window":"60s"},"request_id":"d1"}`)
	postJSON(t, c.Nodes[0].URL("/v1/check"), `{"key":"r","limit":{"algorithm":"fixed_window","limit":3,"window":"60s"},"request_id":"d1"}`)
	postJSON(t, c.Nodes[0].URL("/v1/check"), `{"key":""}`)
	// Leader-only series (last contact per follower) need the leader's /metrics.
	var leader, follower *proccluster.Node
	deadline := time.Now().Add(10 * time.Second)
	for leader == nil && time.Now().Before(deadline) {
		for _, nd := range c.Nodes {
			if exposedNames(t, nd.URL(""))["limitd_raft_follower_last_contact_seconds"] {
				leader = nd
			} else {
				follower = nd
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if leader == nil || follower == nil {
		t.Fatal("no node reports follower last contact: no leader with followers")
	}
	for _, nd := range []*proccluster.Node{leader, follower} {
		have := exposedNames(t, nd.URL(""))
		for panel, names := range used {
			for _, n := range names {
				if !have[n] && !(nd == follower && n == "limitd_raft_follower_last_contact_seconds") {
					t.Errorf("panel %q queries %s, which %s's /metrics lacks", panel, n, nd.ID)
				}
			}
		}
	}
}
