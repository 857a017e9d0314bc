package tokenizer

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// pythonCases were rendered by Python Jinja2 3.1.6 in an environment built
// as transformers builds it (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loopcontrols, {% generation %}, its tojson, raise_exception
// and strftime_now at 2024-07-26 09:05:03.123456), with tools=None and
// documents=None by default. They cover what real chat templates lean on
// beyond the shared conversations: tool calls and tool schemas through
// tojson, Python str methods, negative indexing, namespaces, loop controls,
// tests, dict methods, whitespace control, and the expressions gonja cannot
// parse as written (see chat_rewrite.go). Each case is Render's output, byte
// for byte, or the message of the raise_exception that aborted it.
type pythonCase struct {
	name   string
	shared string // a tokenizer in ../shared/tokenizers whose template to use, or
	source string // the template itself
	// messages and extra are JSON; values reach the template as
	// json.RawMessage, so their key order is the JSON's.
	messages            string
	addGenerationPrompt bool
	extra               string
	want                string
	raised              string
}

var pythonCases = []pythonCase{
	{
		name:                "qwen3_tools",
		shared:              "qwen3",
		messages:            "[{\"role\": \"system\", \"content\": \"You are helpful.\"}, {\"role\": \"user\", \"content\": \"Weather in Paris and Tokyo?\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 2}}}, {\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Tokyo\\\"}\"}}]}, {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 21}\"}, {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 28}\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nCompare them.\\n</think>\\n\\nParis is 21°C, Tokyo 28°C.\"}, {\"role\": \"user\", \"content\": \"<tool_response>x</tool_response>\"}]",
		addGenerationPrompt: true,
		extra:               "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather — «now» in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name, e.g. \\\"Paris\\\"\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}, \"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 7}, \"ratio\": {\"type\": \"number\", \"default\": 0.5}, \"big\": {\"type\": \"number\", \"default\": 1e+20}, \"tiny\": {\"default\": 1e-07}, \"whole\": {\"default\": 2.0}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}]}",
		want:                "<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather — «now» in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name, e.g. \\\"Paris\\\"\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}, \"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 7}, \"ratio\": {\"type\": \"number\", \"default\": 0.5}, \"big\": {\"type\": \"number\", \"default\": 1e+20}, \"tiny\": {\"default\": 1e-07}, \"whole\": {\"default\": 2.0}}, \"required\": [\"city\"]}}}\n{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris and Tokyo?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n<tool_response>\n{\"temp\": 28}\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\nCompare them.\n</think>\n\nParis is 21°C, Tokyo 28°C.<|im_end|>\n<|im_start|>user\n<tool_response>x</tool_response><|im_end|>\n<|im_start|>assistant\n",
	},
	{
		name:     "qwen3_tools_nosys",
		shared:   "qwen3",
		messages: "[{\"role\": \"user\", \"content\": \"Weather in Paris and Tokyo?\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 2}}}, {\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Tokyo\\\"}\"}}]}, {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 21}\"}, {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 28}\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nCompare them.\\n</think>\\n\\nParis is 21°C, Tokyo 28°C.\"}, {\"role\": \"user\", \"content\": \"<tool_response>x</tool_response>\"}]",
		extra:    "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}]}",
		want:     "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris and Tokyo?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n<tool_response>\n{\"temp\": 28}\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\nCompare them.\n</think>\n\nParis is 21°C, Tokyo 28°C.<|im_end|>\n<|im_start|>user\n<tool_response>x</tool_response><|im_end|>\n",
	},
	{
		name:                "qwen3_nothink",
		shared:              "qwen3",
		messages:            "[{\"role\": \"user\", \"content\": \"hi\"}]",
		addGenerationPrompt: true,
		extra:               "{\"enable_thinking\": false}",
		want:                "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
	},
	{
		name:                "qwen3_think_true",
		shared:              "qwen3",
		messages:            "[{\"role\": \"user\", \"content\": \"hi\"}]",
		addGenerationPrompt: true,
		extra:               "{\"enable_thinking\": true}",
		want:                "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
	},
	{
		name:     "qwen3_reasoning_field",
		shared:   "qwen3",
		messages: "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\", \"reasoning_content\": \"\\nthink hard\\n\"}]",
		want:     "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n<think>\nthink hard\n</think>\n\nb<|im_end|>\n",
	},
	{
		name:     "qwen3_content_with_think_last",
		shared:   "qwen3",
		messages: "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"<think>x</think>\\n\\n\\nanswer\"}]",
		want:     "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n<think>\nx\n</think>\n\nanswer<|im_end|>\n",
	},
	{
		name:                "qwen3_tool_first",
		shared:              "qwen3",
		messages:            "[{\"role\": \"user\", \"content\": \"go\"}, {\"role\": \"assistant\", \"content\": \"ok\", \"tool_calls\": [{\"name\": \"search\", \"arguments\": {}}]}, {\"role\": \"tool\", \"content\": \"r1\"}]",
		addGenerationPrompt: true,
		want:                "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\nok\n<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
	},
	{
		name:     "qwen3_single",
		shared:   "qwen3",
		messages: "[{\"role\": \"user\", \"content\": \"only\"}]",
		want:     "<|im_start|>user\nonly<|im_end|>\n",
	},
	{
		name:                "deepseek_tools",
		shared:              "deepseek_v3",
		messages:            "[{\"role\": \"system\", \"content\": \"S1\"}, {\"role\": \"system\", \"content\": \"S2\"}, {\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}}, {\"type\": \"function\", \"function\": {\"name\": \"g\", \"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"content\": \"r1\"}, {\"role\": \"tool\", \"content\": \"r2\"}, {\"role\": \"assistant\", \"content\": \"done\"}, {\"role\": \"user\", \"content\": \"again\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"h\", \"arguments\": \"[]\"}}]}, {\"role\": \"tool\", \"content\": \"r3\"}]",
		addGenerationPrompt: true,
		want:                "<｜begin▁of▁sentence｜>S1\n\nS2<｜User｜>q<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>r1<｜tool▁output▁end｜>\n<｜tool▁output▁begin｜>r2<｜tool▁output▁end｜><｜tool▁outputs▁end｜>done<｜end▁of▁sentence｜><｜User｜>again\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>h\n```json\n[]\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>\n<｜tool▁output▁begin｜>r3<｜tool▁output▁end｜><｜tool▁outputs▁end｜>",
	},
	{
		name:                "deepseek_tool_end_gen",
		shared:              "deepseek_v3",
		messages:            "[{\"role\": \"system\", \"content\": \"S1\"}, {\"role\": \"system\", \"content\": \"S2\"}, {\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}}, {\"type\": \"function\", \"function\": {\"name\": \"g\", \"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"content\": \"r1\"}, {\"role\": \"tool\", \"content\": \"r2\"}]",
		addGenerationPrompt: true,
		want:                "<｜begin▁of▁sentence｜>S1\n\nS2<｜User｜>q<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>r1<｜tool▁output▁end｜>\n<｜tool▁output▁begin｜>r2<｜tool▁output▁end｜><｜tool▁outputs▁end｜>",
	},
	{
		name:     "llama3_one",
		shared:   "llama3",
		messages: "[{\"role\": \"user\", \"content\": \"\\t hi 　\"}]",
		want:     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
	},
	{
		name:                "f_namespace_loops",
		source:              "{% set ns = namespace(found=false, n=0, last='') %}{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}{% set ns.n = ns.n + 1 %}{% if m.role == 'user' %}{% set ns.last = m.content %}{% endif %}{% if loop.index > 3 %}{% break %}{% endif %}{{ loop.index0 }}:{{ loop.first }}:{{ loop.last }}:{{ loop.length }};{% endfor %}{{ ns.n }} {{ ns.last }}\n{% set x = 1 %}{% for m in messages %}{% set x = x + 1 %}{% endfor %}x={{ x }}\n{% for i in range(3) %}{{ i }}{% else %}none{% endfor %}{% for i in [] %}{{ i }}{% else %}empty{% endfor %}",
		messages:            "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"look \"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"here\"}]}, {\"role\": \"assistant\", \"content\": \"a2\"}]",
		addGenerationPrompt: true,
		extra:               "{\"d\": {\"b\": 2, \"a\": \"x\", \"c\": {\"x\": \"ü\", \"n\": null, \"l\": [1, 2.5, true]}, \"Z\": 1.0}, \"empty\": {}, \"flag\": true, \"other\": 0, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}]}",
		want:                "1:False:False:5;2:False:False:5;3 [{'type': 'text', 'text': 'look '}, {'type': 'image'}, {'type': 'text', 'text': 'here'}]\nx=1\n012empty",
	},
	{
		name:                "f_tojson",
		source:              "{{ d | tojson }}\n{{ d | tojson(indent=2) }}\n{{ d | tojson(sort_keys=true) }}\n{{ d | tojson(ensure_ascii=true) }}\n{{ d | tojson(separators=(',', ':')) }}\n{{ [1, 2.5, 'x', none, true, 1e100, 0.1, 100.0, -0.0, 1e-5, 123456789012345678] | tojson }}\n{{ {'b': 1, 'a': [ ], 'c': { }} | tojson(indent=4) }}\n{{ 'tab\\there \"q\" \\\\ é 😀 \\x7f \\x01' | tojson }} {{ 'é😀\\x7f' | tojson(ensure_ascii=true) }}\n{{ empty | tojson }} {{ none | tojson }} {{ tools | tojson }}",
		messages:            "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"look \"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"here\"}]}, {\"role\": \"assistant\", \"content\": \"a2\"}]",
		addGenerationPrompt: true,
		extra:               "{\"d\": {\"b\": 2, \"a\": \"x\", \"c\": {\"x\": \"ü\", \"n\": null, \"l\": [1, 2.5, true]}, \"Z\": 1.0}, \"empty\": {}, \"flag\": true, \"other\": 0, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}]}",
		want:                "{\"b\": 2, \"a\": \"x\", \"c\": {\"x\": \"ü\", \"n\": null, \"l\": [1, 2.5, true]}, \"Z\": 1.0}\n{\n  \"b\": 2,\n  \"a\": \"x\",\n  \"c\": {\n    \"x\": \"ü\",\n    \"n\": null,\n    \"l\": [\n      1,\n      2.5,\n      true\n    ]\n  },\n  \"Z\": 1.0\n}\n{\"Z\": 1.0, \"a\": \"x\", \"b\": 2, \"c\": {\"l\": [1, 2.5, true], \"n\": null, \"x\": \"ü\"}}\n{\"b\": 2, \"a\": \"x\", \"c\": {\"x\": \"\\u00fc\", \"n\": null, \"l\": [1, 2.5, true]}, \"Z\": 1.0}\n{\"b\":2,\"a\":\"x\",\"c\":{\"x\":\"ü\",\"n\":null,\"l\":[1,2.5,true]},\"Z\":1.0}\n[1, 2.5, \"x\", null, true, 1e+100, 0.1, 100.0, -0.0, 1e-05, 123456789012345678]\n{\n    \"b\": 1,\n    \"a\": [],\n    \"c\": {}\n}\n\"tab\\there \\\"q\\\" \\\\ é 😀 \x7f \\u0001\" \"\\u00e9\\ud83d\\ude00\\u007f\"\n{} null [{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}]",
	},
	{
		name:                "f_strftime",
		source:              "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%-d %B %Y, %A %H:%M:%S %p %I %j %y %m %e|%a %U %W %w %u %V %G') }}|{{ strftime_now('%Y-%m-%d %%') }}",
		messages:            "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"look \"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"here\"}]}, {\"role\": \"assistant\", \"content\": \"a2\"}]",
		addGenerationPrompt: true,
		extra:               "{\"d\": {\"b\": 2, \"a\": \"x\", \"c\": {\"x\": \"ü\", \"n\": null, \"l\": [1, 2.5, true]}, \"Z\": 1.0}, \"empty\": {}, \"flag\": true, \"other\": 0, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}]}",
		want:                "26 Jul 2024|26 July 2024, Friday 09:05:03 AM 09 208 24 07 26|Fri 29 30 5 5 30 2024|2024-07-26 %",
	},
	{
		name:                "f_raise",
		source:              "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{{ m.content }}{% endfor %}",
		messages:            "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"look \"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"here\"}]}, {\"role\": \"assistant\", \"content\": \"a2\"}]",
		addGenerationPrompt: true,
		extra:               "{\"d\": {\"b\": 2, \"a\": \"x\", \"c\": {\"x\": \"ü\", \"n\": null, \"l\": [1, 2.5, true]}, \"Z\": 1.0}, \"empty\": {}, \"flag\": true, \"other\": 0, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}]}",
		raised:              "Conversation roles must alternate user/assistant/user/assistant/...",
	},
	{
		name:                "f_whitespace",
		source:              "A\n  {% if true %}\n    B\n  {% endif %}\n  {%- if true -%}\n    C\n  {%+ endif %}\n{# comment #}\n  {{ 'D' }}\n{% for m in messages %}\n  - {{ m.role }}\n{% endfor %}\nE  {%- raw %} {{ x }} {% endraw %}\n",
		messages:            "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"look \"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"here\"}]}, {\"role\": \"assistant\", \"content\": \"a2\"}]",
		addGenerationPrompt: true,
		extra:               "{\"d\": {\"b\": 2, \"a\": \"x\", \"c\": {\"x\": \"ü\", \"n\": null, \"l\": [1, 2.5, true]}, \"Z\": 1.0}, \"empty\": {}, \"flag\": true, \"other\": 0, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}]}",
		want:                "A\n    B\nC\n    D\n  - system\n  - user\n  - assistant\n  - user\n  - assistant\nE {{ x }} ",
	},
	{
		name:                "f_parts",
		source:              "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% elif p['type'] == 'image' %}<img>{% endif %}{% endfor %}{% endif %}|{% endfor %}",
		messages:            "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"look \"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"here\"}]}, {\"role\": \"assistant\", \"content\": \"a2\"}]",
		addGenerationPrompt: true,
		extra:               "{\"d\": {\"b\": 2, \"a\": \"x\", \"c\": {\"x\": \"ü\", \"n\": null, \"l\": [1, 2.5, true]}, \"Z\": 1.0}, \"empty\": {}, \"flag\": true, \"other\": 0, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}]}",
		want:                "sys|u1|a1|look <img>here|a2|",
	},
	{
		name:                "f_generation",
		source:              "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% set inner = 1 %}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}[{{ inner is defined }}]",
		messages:            "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"look \"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"here\"}]}, {\"role\": \"assistant\", \"content\": \"a2\"}]",
		addGenerationPrompt: true,
		extra:               "{\"d\": {\"b\": 2, \"a\": \"x\", \"c\": {\"x\": \"ü\", \"n\": null, \"l\": [1, 2.5, true]}, \"Z\": 1.0}, \"empty\": {}, \"flag\": true, \"other\": 0, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}]}",
		want:                "sysu1a1[{'type': 'text', 'text': 'look '}, {'type': 'image'}, {'type': 'text', 'text': 'here'}]a2[False]",
	},
	{
		name:                "f_macro",
		source:              "{% macro render(m, prefix='> ') %}{{ prefix }}{{ m.role | upper }}: {{ m.content }}{% endmacro %}{% for m in messages %}{{ render(m) }}\n{% endfor %}{{ render(messages[0], prefix='# ') }}",
		messages:            "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"look \"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"here\"}]}, {\"role\": \"assistant\", \"content\": \"a2\"}]",
		addGenerationPrompt: true,
		extra:               "{\"d\": {\"b\": 2, \"a\": \"x\", \"c\": {\"x\": \"ü\", \"n\": null, \"l\": [1, 2.5, true]}, \"Z\": 1.0}, \"empty\": {}, \"flag\": true, \"other\": 0, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search\\tthe web\\n(second line)\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"required\": []}}}]}",
		want:                "> SYSTEM: sys\n> USER: u1\n> ASSISTANT: a1\n> USER: [{'type': 'text', 'text': 'look '}, {'type': 'image'}, {'type': 'text', 'text': 'here'}]\n> ASSISTANT: a2\n# SYSTEM: sys",
	},
	{
		name:     "f_raise_ok",
		source:   "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{{ m.content }}{% endfor %}",
		messages: "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]",
		want:     "ab",
	},
	{
		name:     "crlf",
		source:   "A\r\n{% if true %}\r\nB\r\n{% endif %}\r\n{{ 'x\r\ny' }}\r\nC\rD\r\n",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "A\nB\nx\ny\nC\nD",
	},
	{
		name:     "comment_trim",
		source:   "A\n  {# c #}\nB\n{#- c -#}\n  C {# x #}  D\n",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "A\nBC   D",
	},
	{
		name:     "lstrip_tabs",
		source:   "A\n\t \t{% if true %}X{% endif %}\n  {{ 'Y' }}\n  {%+ if true %}Z{% endif %}\n {% if true +%}\nW{% endif %}\n",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "A\nX  Y\n  Z\nW",
	},
	{
		name:                "inline_blocks",
		source:              "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}",
		messages:            "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]",
		addGenerationPrompt: true,
		want:                "user: a\nassistant: b\nassistant:",
	},
	{
		name:     "set_block",
		source:   "{% set x %}Hello {{ messages[0].content }}{% endset %}[{{ x }}][{{ x | length }}]",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "[Hello hi][8]",
	},
	{
		name:     "loop_filter",
		source:   "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }}{{ loop.last }}{% endfor %}",
		messages: "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"a\"}]",
		want:     "1userFalse2assistantTrue",
	},
	{
		name:     "ternary_chain",
		source:   "{{ 'a' if messages|length > 1 else 'b' if messages|length == 1 else 'c' }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "b",
	},
	{
		name:     "string_concat_in_set",
		source:   "{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s + m.role[0] | upper %}{% endfor %}{{ ns.s }}",
		messages: "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}]",
		want:     "SU",
	},
	{
		name:     "previtem",
		source:   "{% for m in messages %}{% if loop.previtem is defined %}{{ loop.previtem.role }}>{% endif %}{{ m.role }}{% if loop.nextitem is defined %}<{{ loop.nextitem.role }}{% endif %};{% endfor %}",
		messages: "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"a\"}]",
		want:     "system<user;system>user<assistant;user>assistant;",
	},
	{
		name:     "cycle",
		source:   "{% for m in messages %}{{ loop.cycle('odd', 'even') }}{% endfor %}{{ loop is defined }}",
		messages: "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"a\"}]",
		want:     "oddevenoddFalse",
	},
	{
		name:     "tojson_msgs",
		source:   "{{ messages | tojson }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\", \"name\": \"bob\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, {\"y\": null}]}}}]}]",
		want:     "[{\"role\": \"user\", \"content\": \"hi\", \"name\": \"bob\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, {\"y\": null}]}}}]}]",
	},
	{
		name:     "tojson_indent_str",
		source:   "{{ {'a': [1, {'b': 2}], 'c': 'é'} | tojson(indent='\t') }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "{\n\t\"a\": [\n\t\t1,\n\t\t{\n\t\t\t\"b\": 2\n\t\t}\n\t],\n\t\"c\": \"é\"\n}",
	},
	{
		name:     "tojson_indent0",
		source:   "{{ {'a': [1, 2]} | tojson(indent=0) }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "{\n\"a\": [\n1,\n2\n]\n}",
	},
	{
		name:     "tojson_floats",
		source:   "{{ [0.1, 0.2 + 0.1, 1e16, 1e15, 123456789.123, 1.5e-7, 0.0001, 0.00001, -2.5, 3.0, 1e22, 12345678901234567890.0] | tojson }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "[0.1, 0.30000000000000004, 1e+16, 1000000000000000.0, 123456789.123, 1.5e-07, 0.0001, 1e-05, -2.5, 3.0, 1e+22, 1.2345678901234567e+19]",
	},
	{
		name:     "not_in",
		source:   "{{ 'x' not in messages[0].content }} {{ not messages }} {{ messages[0].role != 'user' }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "True False False",
	},
	{
		name:     "items_filter",
		source:   "{% for k, v in messages[0] | items %}{{ k }}={{ v }};{% endfor %}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\", \"name\": \"n\"}]",
		want:     "role=user;content=hi;name=n;",
	},
	{
		name:     "dictsort",
		source:   "{% for k, v in d | dictsort %}{{ k }}={{ v }};{% endfor %}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		extra:    "{\"d\": {\"b\": 1, \"a\": 2, \"C\": 3}}",
		want:     "a=2;b=1;C=3;",
	},
	{
		name:     "map_upper",
		source:   "{{ messages | map(attribute='role') | map('upper') | join(', ') }}",
		messages: "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}]",
		want:     "SYSTEM, USER",
	},
	{
		name:     "selectattr_defined",
		source:   "{{ messages | selectattr('name', 'defined') | map(attribute='name') | list }}",
		messages: "[{\"role\": \"user\", \"content\": \"s\", \"name\": \"x\"}, {\"role\": \"user\", \"content\": \"u\"}]",
		want:     "['x']",
	},
	{
		name:     "unique_sort",
		source:   "{{ ['b','a','b','c'] | unique | sort | list }} {{ [3,1,2] | sort(reverse=true) | list }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "['a', 'b', 'c'] [3, 2, 1]",
	},
	{
		name:     "kwargs_var",
		source:   "{{ custom_flag }} {{ custom_list | length }} {{ custom_obj.inner.key }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		extra:    "{\"custom_flag\": true, \"custom_list\": [1, 2, 3], \"custom_obj\": {\"inner\": {\"key\": \"v\"}}}",
		want:     "True 3 v",
	},
	{
		name:     "continue_final",
		source:   "{% for m in messages %}{{ m.content }}{% if not loop.last %}\n{% endif %}{% endfor %}",
		messages: "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]",
		want:     "ab",
	},
	{
		name:     "wordcount_etc",
		source:   "{{ 'a b  c' | wordcount }} {{ 'abc' | reverse }} {{ 'Hello' | lower }} {{ '<b>x</b>' | striptags }} {{ 'abcdef' | truncate(5) }} {{ 'x' | center(5) }}|",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "3 cba hello x abcdef   x  |",
	},
	{
		name:     "escape_in_tpl",
		source:   "{{ '<&>' }} {{ '<&>' | e }} {{ \"it's\" }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "<&> &lt;&amp;&gt; it's",
	},
	{
		name:     "content_none_guard",
		source:   "{% for m in messages %}{% if m.content %}{{ m.content }}{% else %}[empty]{% endif %}{% endfor %}",
		messages: "[{\"role\": \"assistant\", \"content\": null}, {\"role\": \"assistant\", \"content\": \"\"}, {\"role\": \"assistant\", \"content\": []}]",
		want:     "[empty][empty][empty]",
	},
	{
		name:     "bos_missing",
		source:   "{{ bos_token }}|{{ eos_token is defined }}|{{ pad_token }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "<s>|False|",
	},
	{
		name:     "cond_paren",
		source:   "{{ 'a' if messages|length > 1 else ('b' if messages|length == 1 else 'c') }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "b",
	},
	{
		name:     "cond_in_concat",
		source:   "{{ '<' + (messages[0].role if messages[0].role != 'tool' else 'user') + '>' }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "<user>",
	},
	{
		name:     "cond_in_set",
		source:   "{% set r = 'x' if messages else 'y' %}{{ r }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "x",
	},
	{
		name:     "cond_in_set_paren",
		source:   "{% set r = ('x' if messages else 'y') + '!' %}{{ r }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "x!",
	},
	{
		name:     "cond_in_arg",
		source:   "{{ raise_exception('no') if false else 'ok' }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "ok",
	},
	{
		name:     "cond_filter",
		source:   "{{ (messages[0].content if messages else '') | upper }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "HI",
	},
	{
		name:     "cond_no_else",
		source:   "[{{ 'x' if false }}]",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "[]",
	},
	{
		name:     "cond_in_list",
		source:   "{{ ['a' if true else 'b', 'c'] | join }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "ac",
	},
	{
		name:     "cond_in_call",
		source:   "{{ 'a,b'.split(',' if true else ';') | length }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "2",
	},
	{
		name:     "cond_chain_set",
		source:   "{% set r = 'a' if false else 'b' if true else 'c' %}{{ r }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "b",
	},
	{
		name:     "cond_nested_output",
		source:   "{{ ('a' if false else 'b') if true else 'c' }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "b",
	},
	{
		name:     "not_precedence",
		source:   "{{ not messages[0].role == 'user' }} {{ not false and true }} {{ (not false) == true }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "False True True",
	},
	{
		name:     "is_not_chain",
		source:   "{{ messages[0].content is not none and messages[0].content is string }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "True",
	},
	{
		name:     "in_with_filter",
		source:   "{{ 'user' in messages | map(attribute='role') | list }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "True",
	},
	{
		name:     "string_escapes",
		source:   "{{ 'a\\'b' }} {{ \"a\\\"b\" }} {{ 'tab\\tnl\\n' }} {{ 'u\\u00e9' }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "a'b a\"b tab\tnl\n ué",
	},
	{
		name:     "list_concat_loop",
		source:   "{% for x in [1] + [2, 3] %}{{ x }}{% endfor %}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "123",
	},
	{
		name:     "filter_chain_args",
		source:   "{{ messages | map(attribute='content') | map('trim') | join('|') }}",
		messages: "[{\"role\": \"user\", \"content\": \" a \"}, {\"role\": \"user\", \"content\": \"b \"}]",
		want:     "a|b",
	},
	{
		name:     "slice_neg",
		source:   "{{ messages[:-1] | length }} {{ messages[-2:] | map(attribute='role') | join(',') }} {{ 'hello'[::-1] }} {{ 'hello'[1:-1] }}",
		messages: "[{\"role\": \"system\", \"content\": \"\"}, {\"role\": \"user\", \"content\": \"\"}, {\"role\": \"assistant\", \"content\": \"\"}]",
		want:     "2 user,assistant olleh ell",
	},
	{
		name:     "length_of_string",
		source:   "{{ 'héllo' | length }} {{ messages[0].content | length }}",
		messages: "[{\"role\": \"user\", \"content\": \"日本語\"}]",
		want:     "5 3",
	},
	{
		name:     "math_mixed",
		source:   "{{ 1 + 1.5 }} {{ 3 - 1 }} {{ 10 / 4 }} {{ -1 * 2 }} {{ (1 + 2) * 3 }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "2.5 2 2.5 -2 9",
	},
	{
		name:     "compare_chain",
		source:   "{{ 1 < 2 < 3 }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "True",
	},
	{
		name:     "dict_literal_iter",
		source:   "{% for k, v in {'z': 1, 'a': 2}.items() %}{{ k }}{{ v }}{% endfor %}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "z1a2",
	},
	{
		name:     "namespace_dict",
		source:   "{% set ns = namespace(d={}) %}{{ ns.d | length }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "0",
	},
	{
		name:     "p_plus",
		source:   "{{ 'a' + messages[0].content | upper }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "aHI",
	},
	{
		name:     "p_cmp",
		source:   "{{ messages | length > 1 }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "True",
	},
	{
		name:     "p_in",
		source:   "{{ 'user' in messages | map(attribute='role') | list }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "True",
	},
	{
		name:     "p_notin",
		source:   "{{ 'x' not in messages | map(attribute='role') | list }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "True",
	},
	{
		name:     "p_plus_num",
		source:   "{{ 1 + messages | length }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "3",
	},
	{
		name:     "p_eq",
		source:   "{{ messages | length == 2 }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "True",
	},
	{
		name:     "p_and",
		source:   "{{ messages | length and messages[0].role | upper }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "USER",
	},
	{
		name:     "p_tilde",
		source:   "{{ 'n=' ~ messages | length }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "n=2",
	},
	{
		name:     "p_neg",
		source:   "{{ -1 | abs }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "1",
	},
	{
		name:     "p_mul",
		source:   "{{ 2 * messages | length }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "4",
	},
	{
		name:     "p_is",
		source:   "{{ messages | length is even }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "True",
	},
	{
		name:     "p_in_plain",
		source:   "{{ 'user' in ['user'] }} {{ 'a' in 'abc' and true }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "True True",
	},
	{
		name:     "rw_andor",
		source:   "{{ (((messages|length > 1) and [('x')]) or [('y')])[0] }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "x",
	},
	{
		name:     "rw_andor_list",
		source:   "{{ (((false) and [(none)]) or [([1,2])])[0] | length }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "2",
	},
	{
		name:     "rw_andor_dict",
		source:   "{{ (((true) and [({'a': 1})]) or [(2)])[0].a }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]",
		want:     "1",
	},
	{
		name:     "t_divisible",
		source:   "{{ 6 is divisibleby(3) }} {{ 6 is divisibleby 4 }} {{ 'a' is equalto 'a' }} {{ messages is sequence }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "True False True True",
	},
	{
		name:     "t_for_items_if",
		source:   "{% for k, v in messages[2].tool_calls[0].function.items() if k != 'name' %}{{ k }}:{{ v | tojson }}{% endfor %}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "arguments:{\"k\": 1}",
	},
	{
		name:     "t_mod_eq",
		source:   "{% for m in messages %}{{ loop.index0 % 2 == 0 }}{% endfor %}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "TrueFalseTrue",
	},
	{
		name:     "t_deep_index",
		source:   "{{ messages[1]['content'][0]['text'] }}{{ messages[1].content[2].text }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "ab",
	},
	{
		name:     "t_sel_join",
		source:   "{{ messages[1].content | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('\\n') }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "a\nb",
	},
	{
		name:     "t_kw_method",
		source:   "{{ 'a,b'.split(sep=',') }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "['a', 'b']",
	},
	{
		name:     "t_len_ne",
		source:   "{{ messages[2].tool_calls[0].id | length != 9 }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "False",
	},
	{
		name:     "t_paren_len_gt",
		source:   "{{ (messages | selectattr('role', 'eq', 'system') | list | length) > 0 }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "True",
	},
	{
		name:     "t_cond_defined",
		source:   "{{ x if x is defined else 'y' }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "y",
	},
	{
		name:     "t_list_accum",
		source:   "{% set ns = namespace(l=[]) %}{% for m in messages %}{% set ns.l = ns.l + [m.role] %}{% endfor %}{{ ns.l | join(',') }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "system,user,assistant",
	},
	{
		name:     "t_trailing_comma",
		source:   "{{ [1, 2,] | length }} {{ {'a': 1,} | length }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "2 1",
	},
	{
		name:     "t_inst",
		source:   "{{ '[INST] ' + messages[0].content|trim + ' [/INST]' }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "[INST] sys [/INST]",
	},
	{
		name:     "t_not_defined",
		source:   "{% if not foo is defined %}nd{% endif %}{% if foo is not defined %}nd2{% endif %}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "ndnd2",
	},
	{
		name:     "t_elif_iter",
		source:   "{% for m in messages %}{% if m.content is string %}S{% elif m.content is iterable %}I{% endif %}{% endfor %}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "SIS",
	},
	{
		name:     "t_tool_args_string_check",
		source:   "{% for tc in messages[2].tool_calls %}{% if tc.function.arguments is mapping %}{{ tc.function.arguments | tojson }}{% endif %}{% endfor %}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "{\"k\": 1}",
	},
	{
		name:     "t_loop_len_idx",
		source:   "{% for m in messages %}{% if loop.index == loop.length %}last={{ m.role }}{% endif %}{% endfor %}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "last=assistant",
	},
	{
		name:     "t_is_none_content",
		source:   "{% for m in messages %}{{ m.content is none }}{% endfor %}",
		messages: "[{\"role\": \"assistant\", \"content\": null}]",
		want:     "True",
	},
	{
		name:     "t_bool_print",
		source:   "{{ true }} {{ messages | length > 0 }} {{ none is none }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "True True True",
	},
	{
		name:     "t_nested_ns",
		source:   "{% set ns = namespace(a=namespace(b=1)) %}{{ ns.a.b }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "1",
	},
	{
		name:     "t_string_mult_concat",
		source:   "{{ '=' * 3 + '>' }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "===>",
	},
	{
		name:     "t_sort_attr",
		source:   "{{ messages | sort(attribute='role') | map(attribute='role') | join(',') }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "assistant,system,user",
	},
	{
		name:     "t_map_default",
		source:   "{{ messages | map(attribute='name', default='anon') | join(',') }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "anon,anon,anon",
	},
	{
		name:     "t_join_attr",
		source:   "{{ messages | join(',', attribute='role') }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "system,user,assistant",
	},
	{
		name:     "t_first_attr",
		source:   "{{ (messages | first).role }} {{ (messages | last)['role'] }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "system assistant",
	},
	{
		name:     "t_startswith_tuple",
		source:   "{{ messages[0].content.startswith(('s', 'x')) }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "True",
	},
	{
		name:     "t_in_attr",
		source:   "{{ 'tool_calls' in messages[2] }} {{ 'nope' in messages[2] }} {{ messages[2].tool_calls is defined }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}]",
		want:     "True False True",
	},
	{
		name:     "r_strings",
		source:   "{{ '}}' + ('%}' if true else '{{') }}|{{ \"it's {% x %}\" }}|{{ 'a\\'}}b' }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "}}%}|it's {% x %}|a'}}b",
	},
	{
		name:     "r_nested_braces",
		source:   "{{ {'a': {'b': 1}}['a']['b'] }}|{{ {'a': (1 if false else 2)}.a }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "1|2",
	},
	{
		name:     "r_comment",
		source:   "{# {{ (a if b else c) }} #}x{#- y -#} z",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "xz",
	},
	{
		name:     "r_ws_markers",
		source:   "A  {{- (' b ' if true else 'c') -}}  C\n  {%- set v = ('d' if false else 'e') -%}\n  {{+ v }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "A b Ce",
	},
	{
		name:     "r_multiline",
		source:   "{{\n  '<' +\n  (messages[0].role\n     if messages\n     else 'none')\n  + '>'\n}}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "<system>",
	},
	{
		name:     "r_call_kwargs",
		source:   "{{ messages | map(attribute=('role' if true else 'content')) | join(',') }}|{{ 'a-b'.split('-' if true else '+')[1] }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "system,user,assistant|b",
	},
	{
		name:     "r_dict_value",
		source:   "{{ {'k': ('x' if false else 'y'), 'j': 1 if true else 2}.k }}{{ {'k': 1 if true else 2}.k }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "y1",
	},
	{
		name:     "r_list_elems",
		source:   "{{ [1 if false else 2, 3 if true else 4, 5] | join('-') }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "2-3-5",
	},
	{
		name:     "r_slice",
		source:   "{{ messages[(1 if true else 0):] | length }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "2",
	},
	{
		name:     "r_for_iter",
		source:   "{% for m in (messages if true else []) if m.role != 'system' %}{{ m.role }}{% endfor %}|{% for m in messages if m.role in ['user', 'assistant'] | list %}{{ loop.index }}{% endfor %}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "userassistant|12",
	},
	{
		name:     "r_if_in",
		source:   "{% if 'user' in messages | map(attribute='role') | list and true %}yes{% endif %}{% if 'x' not in messages|map(attribute='role') %}no-x{% endif %}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "yesno-x",
	},
	{
		name:     "r_elif_cond",
		source:   "{% if false %}a{% elif ('b' if true else '') %}b{% endif %}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "b",
	},
	{
		name:     "r_chain_output",
		source:   "{{ 'a' if messages|length > 5 else 'b' if messages|length > 2 else 'c' }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "b",
	},
	{
		name:     "r_chain_set",
		source:   "{% set r = 'a' if false else 'b' if false else 'c' %}{{ r }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "c",
	},
	{
		name:     "r_cond_no_else_nested",
		source:   "[{{ ('x' if false) }}]",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "[]",
	},
	{
		name:     "r_in_with_math",
		source:   "{{ 3 in [1, 2] + [3] }} {{ 'b' in 'a' ~ 'b' }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "True True",
	},
	{
		name:     "r_lazy_raise",
		source:   "{{ ('ok' if true else raise_exception('never')) }}{{ (raise_exception('never2') if false else 'ok2') }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "okok2",
	},
	{
		name:     "r_lazy_error",
		source:   "{{ (messages[0].content if messages[0].content is string else messages[0].content[0].text) }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "sys",
	},
	{
		name:                "r_gemma_like",
		source:              "{% if messages[0]['role'] == 'system' %}{% set first_user_prefix = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}",
		messages:            "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		addGenerationPrompt: true,
		want:                "<start_of_turn>user\nsys\n\nu1<end_of_turn>\n<start_of_turn>model\na1<end_of_turn>\n<start_of_turn>model\n",
	},
	{
		name:     "r_trailing_commas",
		source:   "{{ [1, 2,] | length }}{{ {'a': 1,} | length }}{{ (1,) | length }}{{ [\n 1,\n 2,\n] | length }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "2112",
	},
	{
		name:     "r_tuple_in",
		source:   "{{ 'a' in ('a', 'b') }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "True",
	},
	{
		name:     "r_percent_block",
		source:   "{% set x = 7 % 3 %}{{ x }}{%- set y = 8 % 3 -%}{{ y }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "12",
	},
	{
		name:     "r_is_test_arg",
		source:   "{{ messages | selectattr('role', 'in', ['user', 'system']) | list | length }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "2",
	},
	{
		name:     "r_macro_call",
		source:   "{% macro f(a, b='d') %}{{ a }}{{ b }}{% endmacro %}{{ f('x' if true else 'y', b=('z' if false else 'w')) }}",
		messages: "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}]",
		want:     "xw",
	},
	{
		name:     "ws1",
		source:   "{%-\n set x = 1 %}{{ x }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "1",
	},
	{
		name:     "ws2",
		source:   "{% set x = 1\n%}{{ x }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "1",
	},
	{
		name:     "ws3",
		source:   "{%   set x = 1 %}{{ x }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "1",
	},
	{
		name:     "ws4",
		source:   "{%\tset x = 1 %}{{ x }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "1",
	},
	{
		name:     "ws5",
		source:   "{{\n 'a'\n}}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "a",
	},
	{
		name:     "ws6",
		source:   "{% if true\n %}y{% endif\n%}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "y",
	},
	{
		name:     "ws7",
		source:   "{%-  \n        set categories = ({\n 'a': 1,\n }) -%}{{ categories.a }}",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "1",
	},
	{
		name:     "set_noelse",
		source:   "{% set x = 'a' if false %}[{{ x }}]{% set y = 'b' if true %}[{{ y }}]",
		messages: "[{\"role\": \"user\", \"content\": \"hi\"}]",
		want:     "[][b]",
	},
	{
		name:     "s_escapes",
		source:   "{{ '\\n' }}{{ '\\t' }}{{ '\\'' }}{{ '\\\"' }}{{ '\\\\' }}{{ '|\\n|\\t|\\'|\\\"|\\\\|' }}{{ \"a\\\\\" }}{{ '\\x41\\u00e9\\101\\\\d' }}",
		messages: "[{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"21C\"}]",
		want:     "\n\t'\"\\|\n|\t|'|\"|\\|a\\AéA\\d",
	},
	{
		name:     "s_dict_kwargs_order",
		source:   "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}{{ dict(id=c.id, name=c.function.name, arguments=c.function.arguments) | tojson }}{% endfor %}{% elif m.role == 'tool' %}{{ dict(call_id=m.tool_call_id, content=m.content) | tojson }}{% endif %}{% endfor %}",
		messages: "[{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"21C\"}]",
		want:     "{\"id\": \"call_1\", \"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}{\"call_id\": \"call_1\", \"content\": \"21C\"}",
	},
	{
		name:     "s_newline_after_open",
		source:   "{%-\n    set x = ({\n      'b': 1,\n      'a': 2,\n    }) -%}\n{{ x | tojson }}",
		messages: "[{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"21C\"}]",
		want:     "{\"b\": 1, \"a\": 2}",
	},
	{
		name:     "s_set_no_else",
		source:   "{% set a = 'x' if false %}[{{ a }}]{% set b = 'y' if true %}[{{ b }}]",
		messages: "[{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"21C\"}]",
		want:     "[][y]",
	},
	{
		name:     "s_content_none_is_none",
		source:   "{% for m in messages %}{% if m.content is none %}N{% else %}{{ m.content }}{% endif %}{% endfor %}",
		messages: "[{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"21C\"}]",
		want:     "Weather?N21C",
	},
}

func TestChatTemplatePythonCases(t *testing.T) {
	templates := map[string]*ChatTemplate{}
	for _, c := range pythonCases {
		t.Run(c.name, func(t *testing.T) {
			tmpl := templates[c.shared+c.source]
			if tmpl == nil {
				if c.shared != "" {
					tmpl = loadSharedChatTemplate(t, c.shared)
				} else {
					var err error
					if tmpl, err = NewChatTemplate(c.source, map[string]string{"bos_token": "<s>"}); err != nil {
						t.Fatal(err)
					}
				}
				tmpl.now = func() time.Time { return time.Date(2024, 7, 26, 9, 5, 3, 123456000, time.Local) }
				templates[c.shared+c.source] = tmpl
			}
			got, err := tmpl.Render(rawMessages(t, c.messages), c.addGenerationPrompt, rawExtra(t, c.extra))
			if c.raised != "" {
				var raised *RaisedError
				if !errors.As(err, &raised) || raised.Message != c.raised {
					t.Fatalf("got %q, %v; want the template to raise %q", got, err, c.raised)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

// rawMessages decodes messages keeping every value as JSON text.
func rawMessages(t *testing.T, text string) []ChatMessage {
	t.Helper()
	var decoded []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &decoded); err != nil {
		t.Fatal(err)
	}
	messages := make([]ChatMessage, len(decoded))
	for i, fields := range decoded {
		messages[i] = ChatMessage{}
		for key, value := range fields {
			messages[i][key] = value
		}
	}
	return messages
}

// rawExtra decodes template variables keeping every value as JSON text.
func rawExtra(t *testing.T, text string) map[string]any {
	t.Helper()
	if text == "" {
		return nil
	}
	var decoded map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &decoded); err != nil {
		t.Fatal(err)
	}
	extra := make(map[string]any, len(decoded))
	for key, value := range decoded {
		extra[key] = value
	}
	return extra
}
