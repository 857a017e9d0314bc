package gguf

import (
	"math"
	"strconv"
)

// The helpers below read typed values from a metadata map (File.Metadata,
// or model.TokenizerSource.GGUFMetadata), accepting any numeric width the
// writer chose: converters disagree on u32 vs i32 vs u64 for the same key.

// String returns md[key] when it is a string.
func String(md map[string]any, key string) (string, bool) {
	s, ok := md[key].(string)
	return s, ok
}

// Int returns md[key] when it is an integer of any width that fits an int.
func Int(md map[string]any, key string) (int, bool) {
	v, ok := asInt(md[key])
	if !ok || int64(int(v)) != v {
		return 0, false
	}
	return int(v), true
}

// Float returns md[key] when it is a number of any type. A float32 becomes
// the float64 of its shortest decimal form, so that an epsilon written as
// 1e-5 reads back as 1e-5 (as in config.json), not 9.99999974738e-06.
func Float(md map[string]any, key string) (float64, bool) {
	switch v := md[key].(type) {
	case float32:
		f, err := strconv.ParseFloat(strconv.FormatFloat(float64(v), 'g', -1, 32), 64)
		return f, err == nil
	case float64:
		return v, true
	}
	i, ok := asInt(md[key])
	return float64(i), ok
}

// Bool returns md[key] when it is a bool.
func Bool(md map[string]any, key string) (bool, bool) {
	b, ok := md[key].(bool)
	return b, ok
}

// Array returns md[key] when it is an array.
func Array(md map[string]any, key string) ([]any, bool) {
	a, ok := md[key].([]any)
	return a, ok
}

// asInt converts any integer type; a uint64 beyond int64 does not convert.
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}
