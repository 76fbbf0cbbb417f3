package status

import (
	"encoding"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
)

// MarshalFinite is json.Marshal, except that a NaN or ±Inf float (which
// encoding/json refuses) is written as null. A diverging job produces
// them (a loss of NaN), and that is exactly when /status, the dashboard
// and the mesh view must keep working. The common, finite case costs one
// json.Marshal.
func MarshalFinite(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	var uv *json.UnsupportedValueError
	if !errors.As(err, &uv) {
		return b, err
	}
	return json.Marshal(finiteTree(reflect.ValueOf(v)))
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// finiteTree turns v into maps, slices and scalars that encoding/json
// encodes as it would encode v (field names, omitempty, "-", embedded
// structs, Marshalers), with every non-finite float as nil.
func finiteTree(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	if t := v.Type(); t.Implements(jsonMarshaler) || t.Implements(textMarshaler) {
		if v.Kind() == reflect.Pointer && v.IsNil() {
			return nil
		}
		return v.Interface()
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return f
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return finiteTree(v.Elem())
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Interface()
		}
		fallthrough
	case reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = finiteTree(v.Index(i))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		out := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			k, _ := json.Marshal(it.Key().Interface())
			out[strings.Trim(string(k), `"`)] = finiteTree(it.Value())
		}
		return out
	case reflect.Struct:
		out := map[string]any{}
		addFields(out, v)
		return out
	}
	return v.Interface()
}

func addFields(out map[string]any, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fv := v.Field(i)
		if f.Anonymous && name == "" && fv.Kind() == reflect.Struct {
			addFields(out, fv)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if strings.Contains(opts, "omitempty") && isEmptyJSON(fv) {
			continue
		}
		out[name] = finiteTree(fv)
	}
}

func isEmptyJSON(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	}
	return v.IsZero() && v.Kind() != reflect.Struct
}
