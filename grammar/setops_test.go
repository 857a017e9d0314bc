package grammar

import (
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestSchemaSetOperations: keywords compiled through automata and the
// value validator (not, patternProperties, propertyNames, several
// patterns, pattern with lengths, enum beside other keywords). Every text
// is checked against jsonschema/v6 first, so the lists say what JSON Schema
// says; the grammar must accept the valid texts listed and no invalid one.
func TestSchemaSetOperations(t *testing.T) {
	for _, tc := range []struct {
		schema string
		valid  []string // the grammar accepts these
		others []string // valid or not by the validator; the grammar accepts only valid ones
	}{
		{`{"allOf":[{"enum":["", 1, [], null]},{"not":{"type":"array"}}]}`, []string{`""`, `1`, `null`}, []string{`[]`, `2`}},
		{`{"enum":[1, 2, 3, 4, 5, 6], "not":{"multipleOf":2}, "minimum":2}`, []string{`3`, `5`}, []string{`1`, `2`, `4`, `6`}},
		{`{"type":"string","not":{"pattern":"a"}}`, []string{`"xyz"`, `""`, `"b\n"`}, []string{`"cat"`, `"\u0061"`, `"A"`}},
		{`{"type":"string","not":{"enum":["1","3"]}}`, []string{`"2"`, `"13"`, `""`}, []string{`"1"`, `"3"`, `"\u0031"`}},
		{`{"not":{"enum":["1",null]}}`, []string{`"2"`, `2`, `{}`}, []string{`"1"`, `null`, `1`}},
		{`{"type":"object","properties":{"a":{},"b":{}},"not":{"required":["a","b"]}}`, []string{`{"a":1}`, `{"b":2}`, `{}`}, []string{`{"a":1,"b":2}`}},
		{`{"type":"object","not":{"anyOf":[{"required":["x"]},{"required":["y"]}]}}`, []string{`{"z":1}`, `{}`}, []string{`{"x":1}`, `{"z":1,"y":2}`}},
		{`{"type":"string","pattern":"^[a-z]+$","maxLength":3,"minLength":2}`, []string{`"ab"`, `"abc"`}, []string{`"a"`, `"abcd"`, `"aB"`}},
		{`{"type":"string","allOf":[{"pattern":"a"},{"pattern":"b"}]}`, []string{`"ab"`, `"xbxa"`}, []string{`"aa"`, `"b"`}},
		{`{"type":"string","format":"uuid","maxLength":40}`, []string{`"123e4567-e89b-12d3-a456-426614174000"`}, []string{`"123e4567"`}},
		{`{"type":"object","patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false}`,
			[]string{`{"x-a":1}`, `{}`, `{"x-":2,"x-b":3}`}, []string{`{"x-a":"s"}`, `{"y":1}`, `{"\u0078-a":"s"}`}},
		{`{"type":"object","properties":{"x-id":{"type":"string"}},"patternProperties":{"^x-":{"type":"string","maxLength":2},"id$":{"type":"string","minLength":2}}}`,
			[]string{`{"x-id":"ab"}`, `{"x-a":"b","y":null,"myid":"abc"}`, `{"x-id":"ab","name":1}`}, []string{`{"x-id":"abc"}`, `{"x-id":"a"}`, `{"x-id":1}`, `{"x-aid":"a"}`, `{"x-aid":"abc"}`, `{"x-aid":"ab"}`}},
		{`{"type":"string","maxLength":3}`, []string{`"abc"`, `"é\n"`, `""`, `"\u00e9\"a"`}, []string{`"abcd"`, `"\ud83d\ude00ab"`}},
		{`{"type":"string","minLength":2}`, []string{`"ab"`, `"abcdefgh"`, `"\t\t"`}, []string{`"a"`, `""`}},
		{`{"type":"string","minLength":1,"maxLength":1}`, []string{`"a"`, `"€"`}, []string{`""`, `"ab"`}},
		{`{"enum":[{"a":[1,{}],"b":null}],"not":{"type":"array"}}`, []string{`{"a":[1,{}],"b":null}`, "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": null\n}"}, []string{`{"a":[1],"b":null}`}},
		{`{"type":"object","properties":{"a":{},"b":{}},"minProperties":1}`, []string{`{"a":1}`, `{"b":1}`, `{"a":1,"b":2}`, `{"c":1}`}, []string{`{}`}},
		{`{"type":"object","properties":{"a":{},"b":{}},"required":["a"],"minProperties":2,"maxProperties":3}`,
			[]string{`{"a":1,"b":2}`, `{"a":1,"c":2}`, `{"a":1,"b":2,"c":3}`}, []string{`{"a":1}`, `{"a":1,"b":2,"c":3,"d":4}`, `{"b":1,"c":2}`}},
		{`{"type":"object","additionalProperties":{"type":"integer"},"maxProperties":1}`, []string{`{}`, `{"x":1}`}, []string{`{"x":1,"y":2}`, `{"x":"s"}`}},
		{`{"type":"object","properties":{"a":{},"b":{"type":"integer"},"c":{}},"dependencies":{"a":["c"],"b":{"required":["c"]}}}`,
			[]string{`{}`, `{"a":1,"c":2}`, `{"b":1,"c":2}`, `{"c":3}`}, []string{`{"a":1}`, `{"b":1}`, `{"a":1,"b":2}`}},
		{`{"type":"object","dependentRequired":{"x":["y"]}}`, []string{`{"y":1}`, `{"x":1,"y":2}`}, []string{`{"x":1}`}},
		{`{"type":"integer","multipleOf":7,"minimum":-20,"maximum":30}`, []string{`0`, `14`, `-14`, `28`}, []string{`30`, `35`, `-21`, `15`, `7.0`}},
		{`{"type":"number","multipleOf":0.01}`, []string{`1.23`, `-0.5`, `7`, `1.230`, `0.01`}, []string{`1.234`, `0.001`, `1e2`}},
		{`{"type":"number","multipleOf":1,"exclusiveMinimum":0.5}`, []string{`1`, `2.0`, `10`}, []string{`0`, `1.5`, `0.5`}},
		{`{"type":"integer","not":{"multipleOf":3}}`, []string{`1`, `-2`, `100`}, []string{`0`, `3`, `-9`}},
		{`{"type":"number","multipleOf":2.5}`, []string{`5`, `7.5`, `-2.5`, `0`}, []string{`2`, `1.25`}},
		{`{"type":"object","properties":{"mode":{"type":"string"},"n":{"type":"integer"}},"if":{"properties":{"mode":{"const":"join"}},"required":["mode"]},"then":{"required":["n"]},"else":{"properties":{"n":false}}}`,
			[]string{`{"mode":"join","n":1}`, `{"mode":"x"}`, `{}`}, []string{`{"mode":"join"}`, `{"mode":"x","n":1}`, `{"n":2}`}},
		{`{"type":"object","properties":{"required":{"type":"boolean"},"d":{}},"if":{"properties":{"required":{"const":false}}},"then":{"required":["d"]}}`,
			[]string{`{"required":false,"d":1}`, `{"required":true}`, `{"d":0}`}, []string{`{"required":false}`, `{}`}},
		{`{"oneOf":[{"type":"null"},{"enum":["GET","POST"]}]}`, []string{`null`, `"GET"`}, []string{`"PUT"`, `1`}},
		{`{"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind"]},{"type":"object","properties":{"kind":{"const":"b"}},"required":["kind"]}]}`,
			[]string{`{"kind":"a","x":1}`, `{"kind":"b","x":"s"}`}, []string{`{"kind":"c"}`, `{"kind":"a","x":"s"}`, `{}`}},
		{`{"oneOf":[{"type":"object","required":["a"],"properties":{"a":{}},"additionalProperties":false},{"type":"object","required":["b"]}]}`,
			[]string{`{"a":1}`, `{"b":1}`}, []string{`{}`, `{"c":1}`, `{"a":1,"b":2}`}},
		{`{"type":"number","minimum":0.5,"exclusiveMaximum":2.25}`, []string{`0.5`, `1`, `2.2`, `2.249`, `0.50`, `1.0`}, []string{`0.49`, `2.25`, `2.3`, `-1`, `0`, `2.250`}},
		{`{"type":"number","minimum":-1.5,"maximum":-0.25}`, []string{`-1.5`, `-1`, `-0.25`, `-0.3`, `-1.05`}, []string{`-1.6`, `-0.2`, `0`, `-1.51`}},
		{`{"type":"number","exclusiveMinimum":0.05,"maximum":7}`, []string{`0.051`, `7`, `7.000`, `0.5`}, []string{`0.05`, `0.0`, `7.01`, `0.049`}},
		// oneOf whose branches overlap: each branch minus the others.
		{`{"oneOf":[{"type":"string","pattern":"^[0-9]+$"},{"type":"string"}]}`, []string{`"abc"`, `""`}, []string{`"123"`, `1`}},
		{`{"oneOf":[{"enum":["a","b",1]},{"enum":["b",2]}]}`, []string{`"a"`, `1`, `2`}, []string{`"b"`, `3`}},
		{`{"oneOf":[{"type":"integer","minimum":5},{"type":"integer","maximum":10}]}`, []string{`3`, `11`, `4`, `100`}, []string{`5`, `7`, `10`}},
		{`{"oneOf":[{"type":"object","properties":{"key":{"type":"string"}},"additionalProperties":false},{"type":"object","properties":{"keys":{"type":"array"}},"additionalProperties":false}]}`,
			[]string{`{"key":"a"}`, `{"keys":[]}`}, []string{`{}`, `{"key":"a","keys":[]}`, `{"key":1}`}},
		{`{"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"type":"object","properties":{"b":{"type":"integer"}},"required":["b"]}]}`,
			[]string{`{"a":1}`, `{"b":1,"c":2}`}, []string{`{"a":1,"b":2}`, `{}`, `{"a":1,"b":"x"}`}},
		// uniqueItems over listed values: each value at most once.
		{`{"type":"array","uniqueItems":true,"items":{"enum":["a","b",1,1.0]}}`, []string{`[]`, `["a",1]`, `["b","a"]`, `[1.0,"b"]`}, []string{`["a","a"]`, `[1,1.0]`, `[1,"b",1]`, `["c"]`}},
		{`{"type":"array","uniqueItems":true,"items":{"type":"boolean"},"minItems":1}`, []string{`[true]`, `[false, true]`}, []string{`[]`, `[true,true]`, `[false,true,false]`}},
		{`{"type":"array","uniqueItems":true,"maxItems":1}`, []string{`[]`, `["x"]`, `[{}]`}, []string{`[1,2]`, `[1,1]`}},
		// not of several keywords: the union of their negations.
		{`{"type":"object","not":{"properties":{"a":{"type":"string"}}}}`, []string{`{"a":1}`, `{"a":null,"b":"s"}`}, []string{`{}`, `{"a":"s"}`, `{"b":1}`}},
		{`{"not":{"anyOf":[{"type":"string"},{"type":"null"}]}}`, []string{`1`, `{}`, `[null]`, `true`}, []string{`"s"`, `null`}},
		{`{"type":"integer","not":{"allOf":[{"minimum":3},{"maximum":5}]}}`, []string{`2`, `6`, `-1`}, []string{`3`, `4`, `5`}},
		{`{"type":"array","not":{"minItems":2}}`, []string{`[]`, `[1]`}, []string{`[1,2]`, `[1,2,3]`}},
		{`{"type":"object","not":{"type":"object","required":["a"],"maxProperties":1}}`, []string{`{}`, `{"a":1,"b":2}`, `{"b":1}`}, []string{`{"a":1}`}},
		{`{"type":"object","minProperties":1,"maxProperties":2,"properties":{"a":{},"b":{}},"required":["a"],"additionalProperties":false}`,
			[]string{`{"a":1}`, `{"b":1,"a":2}`}, []string{`{}`, `{"b":1}`, `{"a":1,"c":2}`}},
		{`{"type":"object","propertyNames":{"not":{"pattern":"a"}}}`, []string{`{"b":1}`, `{}`}, []string{`{"a":1}`, `{"ba":1}`}},
		{`{"type":"object","properties":{"ab":{},"c":{}},"propertyNames":{"maxLength":1}}`, []string{`{"c":1}`, `{"d":true}`}, []string{`{"ab":1}`, `{"dd":1}`}},
	} {
		g, err := JSONSchema([]byte(tc.schema), JSONOptions{})
		if err != nil {
			t.Errorf("%s: %v", tc.schema, err)
			continue
		}
		v := testValidator(t, tc.schema)
		c := Compile(g, nil)
		for _, text := range append(append([]string(nil), tc.valid...), tc.others...) {
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
			if err != nil {
				t.Fatal(err)
			}
			valid := v.Validate(inst) == nil
			listed := false
			for _, x := range tc.valid {
				listed = listed || x == text
			}
			if listed && !valid {
				t.Errorf("%s: %s is listed as valid but does not validate", tc.schema, text)
			}
			m := c.NewMatcher()
			accepted := m.AcceptBytes([]byte(text)) && m.CanEnd()
			if accepted && !valid {
				t.Errorf("%s: invalid %s accepted", tc.schema, text)
			}
			if listed && !accepted {
				t.Errorf("%s: valid %s rejected", tc.schema, text)
			}
		}
	}
	for _, schema := range []string{
		`{"type":"number","multipleOf":0.0000001}`,
		`{"oneOf":[{"type":"array","items":{"type":"string"}},{"type":"array","maxItems":2}]}`, // neither excludes the other
		`{"not":{}}`, // no value at all
		`{"type":"object","patternProperties":{"a":{},"b":{},"c":{},"d":{},"e":{}}}`,
	} {
		if _, err := JSONSchema([]byte(schema), JSONOptions{}); err == nil {
			t.Errorf("%s: compiled", schema)
		}
	}
}

func testValidator(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	v, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return v
}
