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

package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// markdownLink matches [text](target) and ![alt](target), with an optional
// title after the target.
var markdownLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// unfenced is a Markdown file without its fenced code blocks.
func unfenced(md string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// prose is a Markdown file without code, fenced or inline, where brackets
// and parentheses are not links.
func prose(md string) string {
	lines := unfenced(md)
	for i, line := range lines {
		parts := strings.Split(line, "`")
		for j := 1; j < len(parts); j += 2 {
			parts[j] = ""
		}
		lines[i] = strings.Join(parts, "")
	}
	return strings.Join(lines, "\n")
}

// anchors are the fragment identifiers GitHub gives a file's headings:
// lower case, punctuation dropped, spaces as hyphens, a repeated heading
// numbered from -1.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range unfenced(md) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// TestRelativeLinksResolve: every relative link in the repository's
// Markdown names a file that exists and, when it has a fragment, a heading
// of that file, so that moving a section between pages cannot leave a
// reader at a dead link.
func TestRelativeLinksResolve(t *testing.T) {
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %d Markdown files under %s", len(files), repoRoot)
	}
	links := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(repoRoot, file)
		for _, m := range markdownLink.FindAllStringSubmatch(prose(string(raw)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, fragment, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
			}
			content, err := os.ReadFile(dest)
			if err != nil {
				if info, statErr := os.Stat(dest); statErr == nil && info.IsDir() && fragment == "" {
					continue
				}
				t.Errorf("%s links to %s: %v", name, target, err)
				continue
			}
			if fragment != "" && !anchors(string(content))[fragment] {
				t.Errorf("%s links to %s: no heading with that anchor", name, target)
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative links found: the pattern no longer matches")
	}
}

// TestAnchors pins the slug rule on headings of the kinds the docs use.
func TestAnchors(t *testing.T) {
	got := anchors("# Benchmarks\n## kustomize (`make deploy`)\n### What the Gateway needs\n## Endpoint Picker Protocol (Gateway API)\n## Security: tenants, network boundary\n```\n# not a heading\n```\n## Limits\n## Limits\n")
	for _, want := range []string{"benchmarks", "kustomize-make-deploy", "what-the-gateway-needs", "endpoint-picker-protocol-gateway-api", "security-tenants-network-boundary", "limits", "limits-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a code block made an anchor")
	}
}
