package vllmsim

import (
	"embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// PinnedRelease is the vLLM release whose `vllm serve` command line the
// simulator speaks: the tag of the operator's default image (cmd/main.go's
// defaultVLLMImage; a test there keeps the two equal).
const PinnedRelease = "v0.30.0"

// The command lines, one file per release, each naming the vLLM source
// files and tag it was read from (see servecli/README.md to add one).
//
//go:embed servecli/*.json
var serveCLIFiles embed.FS

// ServeCLI is the `vllm serve` command line of one vLLM release, parsed
// the way vLLM's argparse parser does: an option it does not know, or a
// value of the wrong type or outside the option's choices, is an error with
// argparse's message.
type ServeCLI struct {
	Release string
	prog    string
	flags   map[string]*serveFlag // by every name it answers to, --no- forms included
}

type serveFlag struct {
	Names   []string `json:"names"`
	Type    string   `json:"type"`   // str, int, float, human_readable_int, human_readable_int_or_auto
	Action  string   `json:"action"` // "" (store), boolean_optional, store_true
	Nargs   string   `json:"nargs"`  // "" (one value) or "+"
	Choices []string `json:"choices"`
}

// LoadServeCLI loads the command line of release (for example "v0.30.0").
func LoadServeCLI(release string) (*ServeCLI, error) {
	data, err := serveCLIFiles.ReadFile("servecli/" + release + ".json")
	if err != nil {
		return nil, fmt.Errorf("no vllm serve command line for %s: %w", release, err)
	}
	var file struct {
		Release string       `json:"release"`
		Prog    string       `json:"prog"`
		Flags   []*serveFlag `json:"flags"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("vllm serve command line %s: %w", release, err)
	}
	c := &ServeCLI{Release: file.Release, prog: file.Prog, flags: map[string]*serveFlag{}}
	for _, f := range file.Flags {
		names := slices.Clone(f.Names)
		if f.Action == "boolean_optional" {
			names = append(names, "--no-"+strings.TrimPrefix(f.Names[0], "--"))
		}
		for _, n := range names {
			if _, dup := c.flags[n]; dup {
				return nil, fmt.Errorf("vllm serve command line %s: %s defined twice", release, n)
			}
			c.flags[n] = f
		}
	}
	return c, nil
}

// PinnedServeCLI is the command line of PinnedRelease.
func PinnedServeCLI() *ServeCLI {
	c, err := LoadServeCLI(PinnedRelease)
	if err != nil {
		panic(err) // the file is embedded: a broken one fails every test
	}
	return c
}

// Has reports whether the release has the option name (a long option in
// either spelling, a short one, or a --no- form).
func (c *ServeCLI) Has(name string) bool {
	_, ok := c.flags[canonicalOption(name)]
	return ok
}

// ServeArgs is a parsed `vllm serve` command line.
type ServeArgs struct {
	// Model is the positional model_tag (or --model).
	Model string
	// values holds each option's values by its first name; the last
	// occurrence of an option wins, as in argparse. A boolean option holds
	// "true" or "false".
	values map[string][]string
}

// Value is the value of an option (its last, for one given several), and
// whether the command line set it.
func (a ServeArgs) Value(name string) (string, bool) {
	v, ok := a.values[name]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// Values are the values of an option given several (nargs "+"), from its
// last occurrence; nil when the command line does not set it.
func (a ServeArgs) Values(name string) []string { return a.values[name] }

// UsageError is argparse's refusal of a command line: vLLM prints
// "<prog>: error: <message>" after its usage and exits with status 2.
type UsageError struct {
	Prog, Message string
}

func (e *UsageError) Error() string { return e.Prog + ": error: " + e.Message }

// negativeNumber is what argparse reads as a value, not an option, when no
// option of the parser looks like one.
var negativeNumber = regexp.MustCompile(`^-\d+$|^-\d*\.\d+$`)

func isOption(arg string) bool {
	return strings.HasPrefix(arg, "-") && arg != "-" && !negativeNumber.MatchString(arg)
}

// canonicalOption spells an option's name as vLLM's parser reads it:
// underscores in a long option's name (up to the first ".") are dashes.
func canonicalOption(name string) string {
	if !strings.HasPrefix(name, "--") {
		return name
	}
	head, tail, dotted := strings.Cut(name[2:], ".")
	name = "--" + strings.ReplaceAll(head, "_", "-")
	if dotted {
		name += "." + tail
	}
	return name
}

// Parse parses args, the arguments after `vllm serve`, as argparse would:
// both --opt=value and --opt value, the --no- form of a boolean option,
// the last of a repeated option winning. Arguments it does not recognize
// are refused together, with argparse's "unrecognized arguments: ..."; a
// bad value is refused at once, naming its option.
func (c *ServeCLI) Parse(args []string) (ServeArgs, error) {
	out := ServeArgs{values: map[string][]string{}}
	var unrecognized []string
	positional := func(a string) {
		if out.Model == "" {
			out.Model = a
			return
		}
		unrecognized = append(unrecognized, a)
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			for _, a := range args[i+1:] {
				positional(a)
			}
			break
		}
		if !isOption(arg) {
			positional(arg)
			continue
		}
		name, explicit, hasExplicit := strings.Cut(arg, "=")
		name = canonicalOption(name)
		f, ok := c.flags[name]
		if !ok {
			unrecognized = append(unrecognized, arg)
			continue
		}
		display := f.display()
		var values []string
		switch f.Action {
		case "boolean_optional", "store_true":
			if hasExplicit {
				return out, c.usage("argument %s: ignored explicit argument %s", display, pyRepr(explicit))
			}
			values = []string{strconv.FormatBool(!strings.HasPrefix(name, "--no-"))}
		default:
			switch {
			case hasExplicit:
				values = []string{explicit}
			case f.Nargs == "+":
				for i+1 < len(args) && !isOption(args[i+1]) {
					i++
					values = append(values, args[i])
				}
				if len(values) == 0 {
					return out, c.usage("argument %s: expected at least one argument", display)
				}
			default:
				if i+1 >= len(args) || isOption(args[i+1]) {
					return out, c.usage("argument %s: expected one argument", display)
				}
				i++
				values = []string{args[i]}
			}
			for j, v := range values {
				canonical, err := f.convert(v)
				if err != nil {
					return out, c.usage("argument %s: %v", display, err)
				}
				values[j] = canonical
			}
		}
		if f.Names[0] == "--model" {
			out.Model = values[0]
			continue
		}
		out.values[f.Names[0]] = values
	}
	if len(unrecognized) > 0 {
		return out, c.usage("unrecognized arguments: %s", strings.Join(unrecognized, " "))
	}
	return out, nil
}

func (c *ServeCLI) usage(format string, a ...any) error {
	return &UsageError{Prog: c.prog, Message: fmt.Sprintf(format, a...)}
}

// display is how argparse names the option in an error: its names joined
// by "/", the --no- form included.
func (f *serveFlag) display() string {
	names := slices.Clone(f.Names)
	if f.Action == "boolean_optional" {
		names = append(names, "--no-"+strings.TrimPrefix(f.Names[0], "--"))
	}
	return strings.Join(names, "/")
}

// convert applies the option's type and choices to one value and returns
// it in canonical form (an int as Python prints it).
func (f *serveFlag) convert(v string) (string, error) {
	invalid := fmt.Errorf("invalid %s value: %s", f.Type, pyRepr(v))
	canonical := v
	switch f.Type {
	case "str", "":
	case "int":
		n, err := pyInt(v)
		if err != nil {
			return "", invalid
		}
		canonical = strconv.FormatInt(n, 10)
	case "float":
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return "", invalid
		}
		canonical = strconv.FormatFloat(x, 'g', -1, 64)
	case "human_readable_int", "human_readable_int_or_auto":
		if t := strings.TrimSpace(v); f.Type == "human_readable_int_or_auto" && (t == "-1" || strings.EqualFold(t, "auto")) {
			canonical = "-1"
			break
		}
		n, err := humanReadableInt(v)
		if err != nil {
			return "", invalid
		}
		canonical = strconv.FormatInt(n, 10)
	default:
		return "", fmt.Errorf("unknown type %q in the command line data", f.Type)
	}
	if len(f.Choices) > 0 && !slices.Contains(f.Choices, canonical) {
		shown := canonical
		if f.Type == "str" || f.Type == "" {
			shown = pyRepr(canonical)
		}
		return "", fmt.Errorf("invalid choice: %s (choose from %s)", shown, strings.Join(f.Choices, ", "))
	}
	return canonical, nil
}

// pyInt is Python's int(str): surrounding whitespace, a sign and
// underscores between digits allowed.
func pyInt(v string) (int64, error) {
	t := strings.TrimSpace(v)
	if strings.HasPrefix(t, "_") || strings.HasSuffix(t, "_") || strings.Contains(t, "__") {
		return 0, fmt.Errorf("invalid int %q", v)
	}
	return strconv.ParseInt(strings.ReplaceAll(t, "_", ""), 10, 64)
}

var humanReadable = regexp.MustCompile(`^(\d+(?:\.\d+)?)([kKmMgGtT])$`)

// humanReadableInt is vLLM's human_readable_int: 1k = 1000, 1K = 1024,
// decimals only with the decimal suffixes, else a plain integer.
func humanReadableInt(v string) (int64, error) {
	t := strings.TrimSpace(v)
	m := humanReadable.FindStringSubmatch(t)
	if m == nil {
		return pyInt(t)
	}
	decimal := map[string]float64{"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
	if mult, ok := decimal[m[2]]; ok {
		x, err := strconv.ParseFloat(m[1], 64)
		return int64(x * mult), err
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, err
	}
	shift := map[string]uint{"K": 10, "M": 20, "G": 30, "T": 40}[m[2]]
	return n << shift, nil
}

// pyRepr quotes a string as Python's repr does for the plain strings of a
// command line.
func pyRepr(s string) string {
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		return `"` + s + `"`
	}
	return "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
}
