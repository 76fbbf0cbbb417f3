package nodecmd

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// LoadSources fills every flag of fs that was not set on the command line,
// first from the environment (DSSP_ and the flag name in upper case with
// '-' as '_', e.g. DSSP_GOSSIP_PORT), then from the JSON config file at path
// (an object keyed by flag name; "" for none). Flags set either way count as
// explicitly set (fs.Changed), which is what a joiner checks against the
// mesh's job spec.
func LoadSources(fs *pflag.FlagSet, path string, environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "DSSP_") {
			env[k] = v
		}
	}
	file := map[string]json.RawMessage{}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		if err := json.Unmarshal(b, &file); err != nil {
			return fmt.Errorf("config file %s: not a JSON object of flag names: %v", path, err)
		}
		var unknown []string
		for k := range file {
			if fs.Lookup(k) == nil {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return fmt.Errorf("config file %s: unknown keys %s", path, strings.Join(unknown, ", "))
		}
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		name := "DSSP_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := env[name]; ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment %s=%q: %v", name, v, e)
			}
			return
		}
		raw, ok := file[f.Name]
		if !ok {
			return
		}
		v, e := jsonFlagValue(raw)
		if e == nil {
			e = fs.Set(f.Name, v)
		}
		if e != nil {
			err = fmt.Errorf("config file %s: %q: %v", path, f.Name, e)
		}
	})
	return err
}

// jsonFlagValue turns a JSON scalar or array of scalars into flag text.
func jsonFlagValue(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var list []any
	if json.Unmarshal(raw, &list) == nil {
		parts := make([]string, len(list))
		for i, v := range list {
			parts[i] = fmt.Sprint(v)
		}
		return strings.Join(parts, ","), nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	switch v.(type) {
	case float64, bool:
		return strings.TrimSpace(string(raw)), nil
	}
	return "", fmt.Errorf("value %s is not a string, number, bool or list", raw)
}
