/*
Copyright 2026 The warmroute Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package images

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

const modulePath = "github.com/warmroute/warmroute"

// TestDockerBuildContexts: `docker build` from the repository root works
// for each Dockerfile: every COPY source is in the build context left by
// .dockerignore, and the files the COPY lines place in the builder hold
// every file of this module (Go sources, embedded files, go.mod, go.sum)
// that the binaries its `go build` lines name are compiled from, for
// linux/amd64 and linux/arm64.
func TestDockerBuildContexts(t *testing.T) {
	root := repoRoot(t)
	context := buildContext(t, root)
	for _, dockerfile := range []string{"Dockerfile", "sidecar/Dockerfile.router", "bundle.Dockerfile"} {
		t.Run(dockerfile, func(t *testing.T) {
			df := parseDockerfile(t, filepath.Join(root, dockerfile))
			placed := map[string]bool{} // paths under WORKDIR
			for _, c := range df.copies {
				n := 0
				for _, f := range context {
					dst, ok := c.place(f)
					if !ok {
						continue
					}
					n++
					placed[dst] = true
				}
				if n == 0 {
					t.Errorf("COPY %s %s: no file of the build context is under %s after .dockerignore", strings.Join(c.srcs, " "), c.dst, strings.Join(c.srcs, " "))
				}
			}
			if len(df.packages) == 0 && dockerfile != "bundle.Dockerfile" {
				t.Fatalf("%s: no `go build` of a ./ package found", dockerfile)
			}
			for _, arch := range []string{"amd64", "arm64"} {
				for _, f := range moduleFiles(t, root, arch, df.packages) {
					if !placed[f] {
						t.Errorf("go build %s (linux/%s) needs %s, which the COPY lines do not bring into the builder (or .dockerignore leaves out)", strings.Join(df.packages, " "), arch, f)
					}
				}
			}
		})
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	return root
}

// buildContext lists the files (slash-separated, relative to root) that
// Docker sends as the build context of root: BuildKit walks the tree and
// decides each path with patternmatcher's MatchesUsingParentResults, as
// here. .git and bin (build output) are left out beforehand: Docker would
// send them unless ignored, but no COPY may rely on them.
func buildContext(t *testing.T, root string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatalf("parse .dockerignore: %v", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf("compile .dockerignore: %v", err)
	}
	parents := map[string]patternmatcher.MatchInfo{".": {}}
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == ".git" || rel == "bin" {
			// In a worktree .git is a file; SkipDir there would skip
			// the rest of the directory.
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		excluded, info, err := pm.MatchesUsingParentResults(rel, parents[path.Dir(rel)])
		if err != nil {
			return err
		}
		if d.IsDir() {
			// An excluded directory is still walked when a "!" pattern
			// may bring back something below it, as BuildKit does.
			if excluded && !pm.Exclusions() {
				return fs.SkipDir
			}
			parents[rel] = info
			return nil
		}
		if !excluded {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk the build context: %v", err)
	}
	return files
}

type dockerfile struct {
	copies   []dockerCopy
	packages []string // ./ packages of `go build` lines
}

// dockerCopy is a COPY or ADD from the build context (not --from a stage).
type dockerCopy struct {
	srcs []string
	dst  string
}

// place is where file f of the build context lands relative to WORKDIR,
// if this COPY takes it and copies it to a relative destination.
func (c dockerCopy) place(f string) (string, bool) {
	dstDir := strings.HasSuffix(c.dst, "/") || len(c.srcs) > 1 || c.dst == "."
	dst := strings.TrimPrefix(path.Clean(c.dst), "./")
	for _, src := range c.srcs {
		src = path.Clean(src)
		switch {
		case f == src:
			if path.IsAbs(dst) {
				return "", true
			}
			if dstDir {
				return path.Join(dst, path.Base(f)), true
			}
			return dst, true
		case src == "." || strings.HasPrefix(f, src+"/"):
			if path.IsAbs(dst) {
				return "", true
			}
			rel := f
			if src != "." {
				rel = strings.TrimPrefix(f, src+"/")
			}
			return path.Join(dst, rel), true
		}
	}
	return "", false
}

// dockerInstructions are the instructions of a Dockerfile, continuation
// lines joined and comments dropped as Docker's parser does.
func dockerInstructions(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var instructions []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() > 0) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		if s := strings.TrimSpace(cur.String()); s != "" {
			instructions = append(instructions, s)
		}
		cur.Reset()
	}
	return instructions
}

// parseDockerfile reads the COPY/ADD sources and the packages `go build`
// compiles.
func parseDockerfile(t *testing.T, file string) dockerfile {
	t.Helper()
	var df dockerfile
	for _, ins := range dockerInstructions(t, file) {
		keyword, rest, _ := strings.Cut(ins, " ")
		switch strings.ToUpper(keyword) {
		case "COPY", "ADD":
			args := strings.Fields(rest)
			fromStage := false
			for len(args) > 0 && strings.HasPrefix(args[0], "--") {
				fromStage = fromStage || strings.HasPrefix(args[0], "--from")
				args = args[1:]
			}
			if len(args) > 0 && strings.HasPrefix(args[0], "[") {
				if err := json.Unmarshal([]byte(strings.Join(args, " ")), &args); err != nil {
					t.Fatalf("%s: %s: %v", file, ins, err)
				}
			}
			if len(args) < 2 {
				t.Fatalf("%s: %s: want sources and a destination", file, ins)
			}
			if !fromStage {
				df.copies = append(df.copies, dockerCopy{srcs: args[:len(args)-1], dst: args[len(args)-1]})
			}
		case "RUN":
			for _, cmd := range strings.FieldsFunc(rest, func(r rune) bool { return r == '&' || r == ';' }) {
				if !strings.Contains(cmd, "go build") {
					continue
				}
				fields := strings.Fields(cmd)
				if pkg := fields[len(fields)-1]; strings.HasPrefix(pkg, "./") && !slices.Contains(df.packages, pkg) {
					df.packages = append(df.packages, pkg)
				}
			}
		}
	}
	return df
}

// moduleFiles are the files of this module, relative to root, that
// compiling pkgs for linux/arch reads: go.mod, go.sum and, for each package
// of this module among their dependencies, its Go, assembly and embedded
// files.
func moduleFiles(t *testing.T, root, arch string, pkgs []string) []string {
	t.Helper()
	if len(pkgs) == 0 {
		return nil
	}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Dir,Module,GoFiles,CgoFiles,SFiles,HFiles,SysoFiles,EmbedFiles"}, pkgs...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkgs, err, stderr.String())
	}
	files := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			Dir                                                      string
			Module                                                   *struct{ Path string }
			GoFiles, CgoFiles, SFiles, HFiles, SysoFiles, EmbedFiles []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Module == nil || p.Module.Path != modulePath {
			continue
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.SFiles, p.HFiles, p.SysoFiles, p.EmbedFiles} {
			for _, f := range list {
				files = append(files, filepath.ToSlash(filepath.Join(rel, f)))
			}
		}
	}
	return files
}
