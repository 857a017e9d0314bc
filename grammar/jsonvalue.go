package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// object is a JSON object that keeps its keys in document order: enum
// and const objects are written in it, and the objects whose members
// keep an order keep the schema's "properties" order.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[k]
	return v, ok
}

// parseOrdered decodes JSON into nil, bool, json.Number, string, []any and
// *object. Valid input is scanned directly (a schema's compile starts
// here, and encoding/json's token stream allocates per token); invalid
// input goes through encoding/json for its error.
func parseOrdered(data []byte) (any, error) {
	if json.Valid(data) {
		p := orderedScanner{data: data}
		return p.value(), nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("unexpected data after the JSON value")
	}
	return v, nil
}

// orderedScanner reads JSON known to be valid (json.Valid) into
// parseValue's values.
type orderedScanner struct {
	data []byte
	i    int
}

func (p *orderedScanner) skipWS() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *orderedScanner) value() any {
	p.skipWS()
	switch c := p.data[p.i]; c {
	case '{':
		p.i++
		o := &object{vals: map[string]any{}}
		p.skipWS()
		if p.data[p.i] == '}' {
			p.i++
			return o
		}
		for {
			p.skipWS()
			k := p.str()
			p.skipWS()
			p.i++ // ':'
			v := p.value()
			if _, dup := o.vals[k]; !dup {
				o.keys = append(o.keys, k)
			}
			o.vals[k] = v
			p.skipWS()
			c := p.data[p.i]
			p.i++
			if c == '}' {
				return o
			}
		}
	case '[':
		p.i++
		list := []any{}
		p.skipWS()
		if p.data[p.i] == ']' {
			p.i++
			return list
		}
		for {
			list = append(list, p.value())
			p.skipWS()
			c := p.data[p.i]
			p.i++
			if c == ']' {
				return list
			}
		}
	case '"':
		return p.str()
	case 't':
		p.i += 4
		return true
	case 'f':
		p.i += 5
		return false
	case 'n':
		p.i += 4
		return nil
	default:
		start := p.i
		for p.i < len(p.data) && strings.IndexByte("+-0123456789.eE", p.data[p.i]) >= 0 {
			p.i++
		}
		return json.Number(p.data[start:p.i])
	}
}

// str reads a string at p.i: its bytes as they are when it has no escape
// and is valid UTF-8, else as encoding/json decodes it.
func (p *orderedScanner) str() string {
	start := p.i
	p.i++
	plain := true
	for p.data[p.i] != '"' {
		if p.data[p.i] == '\\' {
			plain = false
			p.i++
		} else if p.data[p.i] >= utf8.RuneSelf {
			plain = false
		}
		p.i++
	}
	p.i++
	raw := p.data[start+1 : p.i-1]
	if plain || utf8.Valid(raw) && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	var out string
	json.Unmarshal(p.data[start:p.i], &out)
	return out
}

func parseValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return o, nil
		case '[':
			list := []any{}
			for dec.More() {
				v, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return tok, nil
	}
}

// marshalCompact writes v as compact JSON, keys in order, without HTML
// escaping: the canonical text of an enum or const value.
func marshalCompact(v any) string {
	var b bytes.Buffer
	writeCompact(&b, v)
	return b.String()
}

func writeCompact(b *bytes.Buffer, v any) {
	switch t := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case json.Number:
		b.WriteString(t.String())
	case string:
		b.WriteString(quoteJSON(t))
	case []any:
		b.WriteByte('[')
		for i, x := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCompact(b, x)
		}
		b.WriteByte(']')
	case *object:
		b.WriteByte('{')
		for i, k := range t.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(quoteJSON(k))
			b.WriteByte(':')
			writeCompact(b, t.vals[k])
		}
		b.WriteByte('}')
	}
}

// quoteJSON encodes s as a JSON string the way Python's json.dumps with
// ensure_ascii=False and Go's encoder without HTML escaping agree on.
func quoteJSON(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return string(bytes.TrimRight(b.Bytes(), "\n"))
}
