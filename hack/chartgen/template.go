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

package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/warmroute/warmroute/hack/manifests"
)

// templater turns an object into template text. Go templates cannot go
// through a YAML encoder, so the object carries placeholder tokens where
// template actions belong: a scalar token stands for an expression in a
// value, a line token (a map key) for whole lines that need the
// indentation of the place they land in (toYaml blocks, conditional keys).
// The tokens are replaced in the encoded YAML.
type templater struct {
	namespace *regexp.Regexp // the kustomize namespace, to become the release's
	n         int
	scalars   map[string]string
	lines     map[string]func(indent string) string
}

func newTemplater(namespace string) *templater {
	return &templater{
		namespace: regexp.MustCompile(`\b` + regexp.QuoteMeta(namespace) + `\b`),
		scalars:   map[string]string{},
		lines:     map[string]func(string) string{},
	}
}

// scalar returns a token that becomes expr.
func (t *templater) scalar(expr string) string {
	t.n++
	tok := fmt.Sprintf("__S%d__", t.n)
	t.scalars[tok] = expr
	return tok
}

// line returns a map key that, with its line, becomes frag(indent).
func (t *templater) line(frag func(indent string) string) string {
	t.n++
	// Keys sort: this one comes last, never first in a list item.
	tok := fmt.Sprintf("zz__L%d__", t.n)
	t.lines[tok] = frag
	return tok
}

var lineToken = regexp.MustCompile(`^(\s*)(- )?(zz__L\d+__): (""|'')$`)

// render encodes obj and replaces its tokens and namespace.
func (t *templater) render(obj map[string]any) (string, error) {
	raw, err := manifests.Marshal(obj)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for l := range strings.SplitSeq(strings.TrimSuffix(string(raw), "\n"), "\n") {
		m := lineToken.FindStringSubmatch(l)
		if m == nil {
			out.WriteString(l + "\n")
			continue
		}
		if m[2] != "" {
			return "", fmt.Errorf("line token %s is the first key of a list item; put it elsewhere", m[3])
		}
		frag, ok := t.lines[m[3]]
		if !ok {
			return "", fmt.Errorf("unknown line token %s", m[3])
		}
		delete(t.lines, m[3])
		out.WriteString(frag(m[1]) + "\n")
	}
	s := out.String()
	for tok, expr := range t.scalars {
		if strings.Contains(s, tok) {
			s = strings.ReplaceAll(s, tok, expr)
			delete(t.scalars, tok)
		}
	}
	// Last, so that the namespace in fragments and values changes too.
	return t.namespace.ReplaceAllString(s, "{{ .Release.Namespace }}"), nil
}

// leftover reports tokens that never made it into a rendered object: a
// bug in chartgen, which would otherwise drop a value silently.
func (t *templater) leftover() error {
	if len(t.scalars)+len(t.lines) > 0 {
		return fmt.Errorf("%d placeholders were not rendered", len(t.scalars)+len(t.lines))
	}
	return nil
}

// block is the YAML of v, each line indented.
func block(v any, indent string) string {
	raw, err := manifests.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err)) // decoded from YAML, so encodable
	}
	var b strings.Builder
	for l := range strings.SplitSeq(strings.TrimSuffix(string(raw), "\n"), "\n") {
		b.WriteString(indent + l + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// withValues is a key filled from a value when that value is not empty.
func withValues(key, value string) func(string) string {
	return func(in string) string {
		return fmt.Sprintf("%[1]s{{- with %[3]s }}\n%[1]s%[2]s:\n%[1]s  {{- toYaml . | nindent %[4]d }}\n%[1]s{{- end }}",
			in, key, value, len(in)+2)
	}
}

// conditional is list items present only when cond holds.
type conditional struct {
	cond  string
	items []any
}

// listWhen is a list key whose always items are kept and each of whose
// conditional items only when their condition holds.
func listWhen(key string, always []any, conds ...conditional) func(string) string {
	return func(in string) string {
		s := in + key + ":"
		if len(always) > 0 {
			s += "\n" + block(always, in)
		}
		for _, c := range conds {
			if len(c.items) > 0 {
				s += fmt.Sprintf("\n%s{{- if %s }}\n%s\n%s{{- end }}", in, c.cond, block(c.items, in), in)
			}
		}
		return s
	}
}

// keyWhen is key: value, present only when cond holds.
func keyWhen(key, value, condition string) func(string) string {
	return func(in string) string {
		return fmt.Sprintf("%[1]s{{- if %[4]s }}\n%[1]s%[2]s: %[3]s\n%[1]s{{- end }}", in, key, value, condition)
	}
}
