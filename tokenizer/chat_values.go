package tokenizer

// Go data as a chat template sees it. Templates were written against the
// Python values that json.loads gives for an OpenAI request: dicts that keep
// key order, lists with Python indexing, ints distinct from floats. Every value
// handed to Render is converted once, up front, into these shapes:
//
//	JSON/Python     here
//	dict            *exec.Dict (ordered pairs); an empty dict is map[string]any{}
//	                because gonja counts every struct, so every *exec.Dict, as true
//	list            pyList
//	int / float     int / float64
//	str, bool, None string, bool, nil
//
// The conversion also copies, so a template can never modify the caller's data.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// pyList is a list as templates see it. gonja's own indexing rejects
// x[-len(x)], so messages[-1] would be undefined in a one-message
// conversation; pyList indexes like Python instead (gonja asks ItemGetter
// first).
type pyList []any

// GetItem implements exec.ItemGetter. An index out of range is undefined, as
// in Jinja, not an error.
func (l pyList) GetItem(key any) (*exec.Value, bool) {
	index, ok := key.(int)
	if !ok {
		return exec.AsValue(nil), false
	}
	if index < 0 {
		index += len(l)
	}
	if index < 0 || index >= len(l) {
		return exec.AsValue(nil), false
	}
	return exec.ToValue(l[index]), true
}

// maxTemplateValueDepth bounds the nesting of converted values; a Go map that
// contains itself would otherwise recurse until the stack overflows.
const maxTemplateValueDepth = 512

// toTemplateValue converts v into the shapes above.
func toTemplateValue(v any) (any, error) {
	return convertTemplateValue(v, 0)
}

func convertTemplateValue(v any, depth int) (any, error) {
	if depth > maxTemplateValueDepth {
		return nil, fmt.Errorf("value nested more than %d levels deep", maxTemplateValueDepth)
	}
	switch x := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return decodeTemplateJSON(x)
	case json.Number:
		return pyJSONNumber(x)
	case string, bool:
		return x, nil
	case []byte:
		return string(x), nil
	case json.Marshaler:
		return marshalToTemplateValue(x)
	}

	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return rv.String(), nil
	case reflect.Bool:
		return rv.Bool(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return int(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if rv.Uint() > math.MaxInt64 {
			return float64(rv.Uint()), nil
		}
		return int(rv.Uint()), nil
	case reflect.Float32, reflect.Float64:
		return pyNumberFromFloat(rv.Float()), nil
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil, nil
		}
		return convertTemplateValue(rv.Elem().Interface(), depth+1)
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return nil, nil
		}
		list := make(pyList, rv.Len())
		for i := range list {
			item, err := convertTemplateValue(rv.Index(i).Interface(), depth+1)
			if err != nil {
				return nil, err
			}
			list[i] = item
		}
		return list, nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			// Python dicts from JSON have string keys; let encoding/json
			// stringify the others.
			return marshalToTemplateValue(v)
		}
		if rv.IsNil() {
			return nil, nil
		}
		keys := make([]string, 0, rv.Len())
		for _, key := range rv.MapKeys() {
			keys = append(keys, key.String())
		}
		slices.SortFunc(keys, compareMessageKeys)
		dict := exec.NewDict()
		for _, key := range keys {
			item, err := convertTemplateValue(rv.MapIndex(reflect.ValueOf(key).Convert(rv.Type().Key())).Interface(), depth+1)
			if err != nil {
				return nil, err
			}
			dict.Pairs = append(dict.Pairs, &exec.Pair{Key: exec.AsValue(key), Value: exec.AsValue(item)})
		}
		return templateDict(dict), nil
	default:
		// Structs and the rest: their JSON form is what a Python caller would
		// have handed over, field order included.
		return marshalToTemplateValue(v)
	}
}

// compareMessageKeys orders a Go map's keys: "role" then "content" (the order of
// every OpenAI message), then the rest sorted. Go maps remember no order, and
// a fixed one keeps renders reproducible.
func compareMessageKeys(a, b string) int {
	rank := func(key string) int {
		switch key {
		case "role":
			return 0
		case "content":
			return 1
		}
		return 2
	}
	if order := cmp.Compare(rank(a), rank(b)); order != 0 {
		return order
	}
	return cmp.Compare(a, b)
}

// pyNumberFromFloat maps a Go float to a Python number. encoding/json decodes every
// JSON number into float64, so a whole float64 most likely was a JSON integer
// (a "maxItems": 3 in a tool schema must not come out as 3.0).
func pyNumberFromFloat(f float64) any {
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return int(f)
	}
	return f
}

// templateDict returns d, or an empty map when d is empty: see the table above.
func templateDict(d *exec.Dict) any {
	if len(d.Pairs) == 0 {
		return map[string]any{}
	}
	return d
}

func marshalToTemplateValue(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeTemplateJSON(raw)
}

// decodeTemplateJSON is json.loads into template values: objects keep their
// key order, numbers keep the integer/float distinction.
func decodeTemplateJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	value, err := decodeTemplateJSONValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("decode JSON value: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode JSON value: data after the value")
	}
	return value, nil
}

func decodeTemplateJSONValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxTemplateValueDepth {
		return nil, fmt.Errorf("value nested more than %d levels deep", maxTemplateValueDepth)
	}
	token, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := token.(type) {
	case json.Delim:
		switch t {
		case '{':
			dict := exec.NewDict()
			for dec.More() {
				keyToken, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := keyToken.(string)
				value, err := decodeTemplateJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				setTemplateDictItem(dict, key, value)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return templateDict(dict), nil
		case '[':
			list := pyList{}
			for dec.More() {
				value, err := decodeTemplateJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, value)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		return pyJSONNumber(t)
	default:
		return t, nil // string, bool or nil
	}
}

// setTemplateDictItem sets key like a Python dict: a repeated key keeps its first
// position and takes the last value.
func setTemplateDictItem(dict *exec.Dict, key string, value any) {
	for _, pair := range dict.Pairs {
		if pair.Key.String() == key {
			pair.Value = exec.AsValue(value)
			return
		}
	}
	dict.Pairs = append(dict.Pairs, &exec.Pair{Key: exec.AsValue(key), Value: exec.AsValue(value)})
}

// pyJSONNumber is Python's reading of a JSON number: int when it has no
// fraction or exponent, float otherwise.
func pyJSONNumber(n json.Number) (any, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return int(i), nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, fmt.Errorf("bad number %q", string(n))
	}
	return f, nil
}

// pyDictItems lists a dict's (key, value) pairs in the dict's order.
func pyDictItems(dict *exec.Value) pyList {
	items := pyList{}
	dict.Iterate(func(_, _ int, key, value *exec.Value) bool {
		items = append(items, pyList{key, value})
		return true
	}, func() {})
	return items
}

// pyDictMethods are the read-only dict methods, in the dict's order (gonja's
// sort the keys). Mutating ones (update, pop, setdefault, clear) are left
// out: transformers' immutable sandbox forbids them as well.
func pyDictMethods() *exec.MethodSet[map[string]any] {
	noArgs := func(name string, args *exec.VarArgs) error {
		if len(args.Args)+len(args.KwArgs) > 0 {
			return exec.ErrInvalidCall(fmt.Errorf("%s() takes no arguments", name))
		}
		return nil
	}
	return exec.NewMethodSet(map[string]exec.Method[map[string]any]{
		"items": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			if err := noArgs("items", args); err != nil {
				return nil, err
			}
			return pyDictItems(self), nil
		},
		"keys": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			if err := noArgs("keys", args); err != nil {
				return nil, err
			}
			keys := pyList{}
			self.Iterate(func(_, _ int, key, _ *exec.Value) bool {
				keys = append(keys, key)
				return true
			}, func() {})
			return keys, nil
		},
		"values": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			if err := noArgs("values", args); err != nil {
				return nil, err
			}
			values := pyList{}
			self.Iterate(func(_, _ int, _, value *exec.Value) bool {
				values = append(values, value)
				return true
			}, func() {})
			return values, nil
		},
		"get": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			if len(args.Args) < 1 || len(args.Args) > 2 || len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(errors.New("get() takes 1 or 2 positional arguments"))
			}
			if args.Args[0].IsString() {
				if value, ok := self.GetItem(args.Args[0].String()); ok {
					return value.Interface(), nil
				}
			}
			if len(args.Args) == 2 {
				return args.Args[1].Interface(), nil
			}
			return nil, nil
		},
		"copy": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			if err := noArgs("copy", args); err != nil {
				return nil, err
			}
			return self.Interface(), nil
		},
	})
}

// pyListMethods holds the read-only list methods; append, reverse and the
// other mutating ones are forbidden by transformers' sandbox.
func pyListMethods() *exec.MethodSet[[]any] {
	return exec.NewMethodSet(map[string]exec.Method[[]any]{
		"copy": func(self []any, _ *exec.Value, args *exec.VarArgs) (any, error) {
			if len(args.Args)+len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(errors.New("copy() takes no arguments"))
			}
			return pyList(self), nil
		},
		"index": func(self []any, _ *exec.Value, args *exec.VarArgs) (any, error) {
			if len(args.Args) != 1 || len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(errors.New("index() takes one argument"))
			}
			for i, item := range self {
				if exec.ToValue(item).EqualValueTo(args.Args[0]) {
					return i, nil
				}
			}
			return nil, fmt.Errorf("%s is not in list", args.Args[0].String())
		},
		"count": func(self []any, _ *exec.Value, args *exec.VarArgs) (any, error) {
			if len(args.Args) != 1 || len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(errors.New("count() takes one argument"))
			}
			n := 0
			for _, item := range self {
				if exec.ToValue(item).EqualValueTo(args.Args[0]) {
					n++
				}
			}
			return n, nil
		},
	})
}
