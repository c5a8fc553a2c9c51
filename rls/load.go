package rls

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MaxFiles bounds the files LoadPath reads from a directory.
const MaxFiles = 1000

// LoadPath reads domains from a YAML file, or from every *.yaml and *.yml
// file of a directory (not its subdirectories; names starting with '.' are
// skipped), in name order. Everything is validated before anything is
// returned: one bad file, or two files with the same domain, fails the whole
// load with an *Error naming the file.
func LoadPath(path string) ([]*Domain, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rls config: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("rls config: %w", err)
		}
		files = files[:0]
		for _, e := range ents {
			name := e.Name()
			ext := strings.ToLower(filepath.Ext(name))
			if e.IsDir() || strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
				continue
			}
			files = append(files, filepath.Join(path, name))
		}
		if len(files) > MaxFiles {
			return nil, fmt.Errorf("rls config: %s: more than %d configuration files", path, MaxFiles)
		}
		sort.Strings(files)
	}
	var out []*Domain
	from := map[string]string{}
	for _, f := range files {
		data, err := readBounded(f)
		if err != nil {
			return nil, err
		}
		d, err := Parse(f, data)
		if err != nil {
			return nil, err
		}
		if prev, dup := from[d.Name()]; dup {
			return nil, &Error{File: f, Field: "domain", Message: fmt.Sprintf("domain %q is also configured in %s", d.Name(), prev)}
		}
		from[d.Name()] = f
		out = append(out, d)
	}
	return out, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rls config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("rls config: %s: %w", path, err)
	}
	if len(data) > MaxConfigBytes {
		return nil, &Error{File: path, Message: fmt.Sprintf("larger than %d bytes", MaxConfigBytes)}
	}
	return data, nil
}
