// Unit tests of the chat template interpreter (engine/tokenizer/chat_template.h): each Jinja
// feature, whitespace control, errors naming the line, the runaway bounds, hostile templates.
// The expected texts are jinja2 3.1.4's, rendered as HF configures it (trim_blocks, lstrip_blocks,
// loopcontrols, HF's tojson); the golden test checks whole real templates against HF itself.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "engine/tokenizer/chat_template.h"

namespace rlrun::engine {
namespace {

using nlohmann::ordered_json;

Result<std::string> render(const std::string& source, const ordered_json& vars = ordered_json::object(),
                           const ChatTemplateLimits& limits = {}) {
  Result<ChatTemplate> t = ChatTemplate::parse(source, limits);
  if (!t.ok()) return t.status();
  return t->render_variables(vars);
}

struct Case {
  const char* name;
  const char* source;
  const char* vars;  // JSON object
  const char* expected;
};

// Each row: a feature, and what jinja2 renders for it.
const Case kCases[] = {
    {"text_only",
     "Hello\n",
     "{}",
     "Hello"},
    {"trailing_newline_kept_once",
     "a\n\n",
     "{}",
     "a\n"},
    {"trim_blocks",
     "{% if true %}\nyes\n{% endif %}\nafter",
     "{}",
     "yes\nafter"},
    {"lstrip_blocks",
     "  {% if true %}\n  x\n  {% endif %}\n",
     "{}",
     "  x\n"},
    {"dash_strips",
     "a   {%- if true -%}   b   {%- endif -%}   c",
     "{}",
     "abc"},
    {"var_dash",
     "a  {{- 'x' -}}  \n b",
     "{}",
     "axb"},
    {"plus_disables_lstrip",
     "  {%+ if true %}x{% endif %}",
     "{}",
     "  x"},
    {"plus_disables_trim",
     "{% if true +%}\nx{% endif %}",
     "{}",
     "\nx"},
    {"comment",
     "a {# note #}\nb\n  {# own line #}\nc",
     "{}",
     "a b\nc"},
    {"comment_dash",
     "a {#- note -#} b",
     "{}",
     "ab"},
    {"raw",
     "{% raw %}{{ not }}{% if %}{% endraw %}",
     "{}",
     "{{ not }}{% if %}"},
    {"var_no_trim",
     "{{ 'a' }}\nb",
     "{}",
     "a\nb"},
    {"crlf",
     "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n",
     "{}",
     "a\nb\n"},
    {"string_escapes",
     "{{ 'a\\'b' ~ \"c\\\"d\" ~ '\\n' ~ '\\t|' ~ '\\\\' ~ '\\u00e9' ~ 'x' 'y' }}",
     "{}",
     "a'bc\"d\n\t|\\éxy"},
    {"numbers",
     "{{ 1 + 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.5 * 2 }} {{ 10 / 5 }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 1_000 }}",
     "{}",
     "3 3.5 3 -4 2 1024 3.0 2.0 1000.0 0.30000000000000004 1000"},
    {"print_values",
     "{{ none }} {{ true }} {{ [1, 'a', none, true] }} {{ {'k': 'v', 'n': 1.0} }} {{ (1,) }} {{ ('a', 'b') }}",
     "{}",
     "None True [1, 'a', None, True] {'k': 'v', 'n': 1.0} (1,) ('a', 'b')"},
    {"string_ops",
     "{{ 'ab' ~ 1 ~ none }} {{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ [1] + [2] }}",
     "{}",
     "ab1None abcd ababab [1, 2]"},
    {"comparisons",
     "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 'x' != 'y' }} {{ 2 >= 3 }}",
     "{}",
     "True True True True True False"},
    {"logic_returns_operands",
     "{{ 0 or 'fallback' }} {{ 'a' and 'b' }} {{ not 0 }} {{ none or [] }}|",
     "{}",
     "fallback b True []|"},
    {"membership",
     "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}",
     "{}",
     "True True True True"},
    {"conditional_expr",
     "{{ 'y' if true else 'n' }} {{ 'y' if false else 'n' }} [{{ 'y' if false }}]",
     "{}",
     "y n []"},
    {"subscripts",
     "{{ messages[0].role }} {{ messages[-1]['content'] }} {{ messages[1:] | length }} {{ messages[9] is defined }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\"}]}",
     "system Hello 2 False"},
    {"slices",
     "{{ 'hello'[::-1] }} {{ 'hello'[1:3] }} {{ [1,2,3,4][::2] }} {{ [1,2,3][-2:] }} {{ 'héllo'[1:2] }}",
     "{}",
     "olleh el [1, 3] [2, 3] é"},
    {"undefined",
     "[{{ nothing }}] {{ nothing is defined }} {{ nothing | length }} {{ nothing | default('d') }} {{ messages[0].missing is defined }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\"}]}",
     "[] False 0 d False"},
    {"attr_of_none_is_undefined",
     "{{ none.x is defined }}",
     "{}",
     "False"},
    {"filters_text",
     "{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'aBc' | upper }}|{{ 'aBc' | lower }}|{{ 'hello wORLD' | capitalize }}|{{ 'hello wORLD-foo(bar' | title }}|{{ 'a-b' | replace('-', '+') }}",
     "{}",
     "a b|a|ABC|abc|Hello world|Hello World-Foo(Bar|a+b"},
    {"filters_lists",
     "{{ [3, 1, 2] | first }} {{ [3, 1, 2] | last }} {{ [3, 1, 2] | join(', ') }} {{ 'abc' | list }} {{ [1, 2] | reverse | list }} {{ [3, 1, 2] | sort }} {{ ['a', 'A', 'b'] | unique | list }} {{ [1, 2] | length }}",
     "{}",
     "3 2 3, 1, 2 ['a', 'b', 'c'] [2, 1] [1, 2, 3] ['a', 'b'] 2"},
    {"filters_convert",
     "{{ '42' | int + 1 }} {{ 'x' | int }} {{ '2.5' | float }} {{ 3 | string ~ '!' }} {{ -3 | abs }} {{ 2.7 | int }}",
     "{}",
     "43 0 2.5 3! 3 2"},
    {"filter_default_boolean",
     "{{ '' | default('d') }}|{{ '' | default('d', true) }}|{{ none | d('x') }}",
     "{}",
     "|d|None"},
    {"tojson",
     "{{ {'b': 1, 'a': [true, none, 1.5, 'é\"\\n']} | tojson }}|{{ [1, {'k': []}] | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}",
     "{}",
     "{\"b\": 1, \"a\": [true, null, 1.5, \"é\\\"\\n\"]}|[\n  1,\n  {\n    \"k\": []\n  }\n]|{\"a\": 2, \"b\": 1}"},
    {"tojson_tools",
     "{{ tools | tojson(indent=4) }}",
     "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}}]}",
     "[\n    {\n        \"type\": \"function\",\n        \"function\": {\n            \"name\": \"f\",\n            \"parameters\": {\n                \"type\": \"object\",\n                \"properties\": {}\n            }\n        }\n    }\n]"},
    {"items_dictsort",
     "{% for k, v in {'b': 1, 'a': 2} | items %}{{ k }}={{ v }};{% endfor %}{% for k, v in {'x': 1}.items() %}{{ k }}{{ v }}{% endfor %}",
     "{}",
     "b=1;a=2;x1"},
    {"selectattr_map",
     "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}|{{ messages | rejectattr('role', 'eq', 'system') | list | length }}|{{ messages | map(attribute='role') | list }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\"}]}",
     "Hi|2|['system', 'user', 'assistant']"},
    {"select_reject",
     "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }} {{ [0, 1, '', 'a'] | select | list }} {{ ['a', 'b'] | map('upper') | list }}",
     "{}",
     "[1, 3] [1, 3] [1, 'a'] ['A', 'B']"},
    {"generator_is_truthy",
     "{{ 'yes' if [] | select('odd') else 'no' }}",
     "{}",
     "yes"},
    {"indent",
     "{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent(2, blank=true) }}",
     "{}",
     "a\n  b\n\n  c|  a\n  b|a\n  \n  b"},
    {"escape_safe",
     "{{ '<a href=\"x\">&\\'' | e }} {{ '<b>' | safe }}",
     "{}",
     "&lt;a href=&#34;x&#34;&gt;&amp;&#39; <b>"},
    {"tests",
     "{{ 1 is number }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ [] is sequence }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ true is true }} {{ 0 is false }} {{ 3 is odd }} {{ 4 is even }} {{ 'a' is equalto 'a' }} {{ 6 is divisibleby 3 }} {{ none is none }} {{ 1 is not none }} {{ 'abc' is lower }}",
     "{}",
     "True True True True True True True True True False True True True True True True True"},
    {"for_loop_vars",
     "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
     "{}",
     "10TrueFalse33b;21FalseFalse32ac;32FalseTrue31b;"},
    {"for_filter_else",
     "{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.last }}{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
     "{}",
     "2False4True|empty"},
    {"for_scope",
     "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
     "{}",
     "21"},
    {"namespace",
     "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.found }} {{ ns.n }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\"}]}",
     "True 3"},
    {"loopcontrols",
     "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "{}",
     "0134"},
    {"if_elif_else",
     "{% for v in [1, 2, 3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %} {% endfor %}",
     "{}",
     "one two many "},
    {"macro",
     "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', punct='?') }} {{ greet(name='Cy') }}",
     "{}",
     "Hi Ann! Hi Bo? Hi Cy!"},
    {"call_block",
     "{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}inner{% endcall %}",
     "{}",
     "[inner]"},
    {"filter_block",
     "{% filter upper %}shout {{ 'this' }}{% endfilter %}",
     "{}",
     "SHOUT THIS"},
    {"set_block",
     "{% set s %}a{{ 1 + 1 }}b{% endset %}[{{ s }}]",
     "{}",
     "[a2b]"},
    {"tuple_unpack",
     "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% for x, y in [[1, 2], [3, 4]] %}{{ x + y }}{% endfor %}",
     "{}",
     "1237"},
    {"range",
     "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}",
     "{}",
     "[0, 1, 2] [1, 3, 5] [3, 2, 1]"},
    {"dict_global",
     "{{ dict(a=1, b='x') | tojson }}",
     "{}",
     "{\"a\": 1, \"b\": \"x\"}"},
    {"str_methods",
     "{{ '  x  '.strip() }}|{{ 'xxhixx'.lstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'ab'.upper() }}|{{ 'hello world'.title() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abc'.find('c') }}|{{ '-'.join(['a', 'b']) }}",
     "{}",
     "x|hixx|['a', 'b', '', 'c']|['a', 'b']|True|True|AB|Hello World|bba|2|a-b"},
    {"dict_methods",
     "{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b', 'd') }} {{ {'a': 1}.get('b') }} {{ {'a': 1, 'b': 2}.keys() | list }} {{ {'a': 1}.values() | list }}",
     "{}",
     "1 d None ['a', 'b'] [1]"},
    {"generation_block",
     "{% generation %}kept{% endgeneration %}",
     "{}",
     "kept"},
    {"special_tokens",
     "{{ bos_token }}x{{ eos_token }}",
     "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     "<s>x</s>"},
    {"loop_cycle",
     "{% for i in range(4) %}{{ loop.cycle('a', 'b') }}{% endfor %}",
     "{}",
     "abab"},

    {"str_format",
     "{{ '<{}|{}>'.format('a', 1) }} {{ '{0}{0}{name}'.format('x', name='y') }} {{ '{{}}{!r}'.format('q') }}",
     "{}",
     "<a|1> xxy {}'q'"},
    {"dictsort",
     "{% for k, v in {'b': 1, 'A': 2, 'c': 0} | dictsort %}{{ k }}{{ v }}{% endfor %}|{{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }}",
     "{}",
     "A2b1c0|[('a', 2), ('b', 1)]"},
    {"min_max",
     "{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'A', 'c'] | min }} {{ [{'n': 2}, {'n': 1}] | max(attribute='n') }} [{{ [] | min }}]",
     "{}",
     "1 3 A {'n': 2} []"},
    {"tojson_ensure_ascii",
     "{{ {'k': 'é 你 🙂'} | tojson(ensure_ascii=true) }}",
     "{}",
     "{\"k\": \"\\u00e9 \\u4f60 \\ud83d\\ude42\"}"},
    {"markup_concat",
     "{{ 'a<'|safe + '<b>' }} {{ ('x'|e) ~ '<' }} {{ '<'|e }}",
     "{}",
     "a<&lt;b&gt; x< &lt;"},
    {"undefined_messages",
     "{{ [1][5] is defined }} {{ none.x is defined }}",
     "{}",
     "False False"},

    {"namespace_holding_itself",
     "{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}|{{ ns.me.me.a }}",
     "{}",
     "<Namespace {'a': 1, 'me': <Namespace {...}>}>|1"},
    {"loop_body_sets_last_one_iteration",
     "{% set x = 1 %}{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}{{ x }}{{ y }}{% set x = x + 10 %}{{ x }};{% endfor %}{{ x }}",
     "{}",
     "1511;111;111;1"},
    {"percent_format",
     "{{ '%s=%d (%r) 100%%' % ('a', 2, 'q') }} {{ 'x%s' % 1 }}",
     "{}",
     "a=2 ('q') 100% x1"},
    {"list_is_not_tuple",
     "{{ [1] == (1,) }} {{ (1, 2) == (1, 2) }}",
     "{}",
     "False True"},
};

TEST(ChatTemplate, RendersEachFeatureAsJinja2) {
  for (const Case& c : kCases) {
    Result<std::string> got = render(c.source, ordered_json::parse(c.vars));
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.status().message();
    EXPECT_EQ(*got, c.expected) << c.name;
  }
}

TEST(ChatTemplate, RendersHFStyleInput) {
  Result<ChatTemplate> t = ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}{{ tools is none }}{{ documents is defined }}");
  ASSERT_TRUE(t.ok()) << t.status().message();
  ChatRenderInput input;
  input.messages = ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  input.add_generation_prompt = true;
  input.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  Result<std::string> got = t->render(input);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, "<s><|user|>Hi</s><|assistant|>TrueTrue");  // HF passes tools=None, documents=None
}

TEST(ChatTemplate, StrftimeNowUsesTheGivenClock) {
  Result<ChatTemplate> t = ChatTemplate::parse("{{ strftime_now('%d %b %Y, %A') }}");
  ASSERT_TRUE(t.ok());
  ChatRenderInput input;
  input.now = [] {
    std::tm tm{};
    tm.tm_year = 124, tm.tm_mon = 6, tm.tm_mday = 26, tm.tm_wday = 5;
    return tm;
  };
  EXPECT_EQ(*t->render(input), "26 Jul 2024, Friday");
}

TEST(ChatTemplate, ParsesOnceRendersMany) {
  Result<ChatTemplate> t = ChatTemplate::parse("{{ messages | length }}");
  ASSERT_TRUE(t.ok());
  for (int n = 0; n < 3; ++n) {
    ChatRenderInput input;
    for (int i = 0; i < n; ++i) input.messages.push_back({{"role", "user"}, {"content", "x"}});
    EXPECT_EQ(*t->render(input), std::to_string(n));
  }
}

TEST(ChatTemplate, RaiseExceptionGivesTheTemplatesMessage) {
  Result<std::string> got = render("line one\n{{ raise_exception('Roles must alternate!') }}");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message(), "chat template raised an exception (line 2): Roles must alternate!");
}

// Syntax errors and unsupported features name the template line.
TEST(ChatTemplate, ErrorsNameTheLineAndTheFeature) {
  struct Bad {
    const char* source;
    const char* message;
  } bad[] = {
      {"a\n{% for x in y %}\nno end", "chat template line 3: unexpected end of template, expected 'endfor' or 'else'"},
      {"{{ x | wordwrap }}", "chat template line 1: filter 'wordwrap' is not supported by rlrun's chat templates"},
      {"\n\n{{ x is prime }}", "chat template line 3: No test named 'prime'."},
      {"{% if true %}{% for m in [1] %}{{ m | nope }}{% endfor %}{% endif %}", "chat template line 1: No filter named 'nope'."},
      {"{% macro f() %}{{ 1 | nope }}{% endmacro %}", "chat template line 1: No filter named 'nope'."},
      {"{{ x | from_json }}", "chat template line 1: No filter named 'from_json'."},
      {"{% extends 'base.html' %}", "chat template line 1: unsupported template tag 'extends'"},
      {"{% include 'x' %}", "chat template line 1: unsupported template tag 'include'"},
      {"{% endif %}", "chat template line 1: unexpected 'endif' tag: no block to close"},
      {"{{ (1 + }}", "chat template line 1: unexpected '}', expected ')'"},
      {"{{ 'open }}", "chat template line 1: unterminated string literal"},
      {"x\n{# never closed", "chat template line 2: missing end of comment tag"},
      {"{{ x ] }}", "chat template line 1: unexpected ']'"},
      {"{% for x in y recursive %}{% endfor %}", "chat template line 1: recursive for loops are not supported"},
  };
  for (const Bad& b : bad) {
    Result<ChatTemplate> t = ChatTemplate::parse(b.source);
    ASSERT_FALSE(t.ok()) << b.source;
    EXPECT_EQ(t.status().message(), b.message) << b.source;
  }
}

TEST(ChatTemplate, RenderErrorsNameTheLine) {
  struct Bad {
    const char* source;
    const char* message;
  } bad[] = {
      {"\n{{ missing.attr }}", "chat template line 2: 'missing' is undefined"},
      {"{{ 'a' + 1 }}", "chat template line 1: can only concatenate str (not \"int\") to str"},
      {"\n\n{{ 1 // 0 }}", "chat template line 3: integer division or modulo by zero"},
      {"{{ [1, 2].append(3) }}", "chat template line 1: access to attribute 'append' of 'list' object is unsafe."},
      {"{{ '{:>5}'.format(1) }}", "chat template line 1: str.format: format specs and attribute lookups ({:>5}) are not supported"},
      {"{{ x | tojson }}", "chat template line 1: Object of type Undefined is not JSON serializable"},
      // like jinja2, unknown names inside an `if` or an inline if fail only when reached
      {"{% if true %}{{ x | from_json }}{% endif %}", "chat template line 1: No filter named 'from_json' found."},
      {"{{ (x is prime) if true }}", "chat template line 1: No test named 'prime' found."},
      {"{{ 9223372036854775807 + 1 }}", "chat template line 1: integer overflow (rlrun's template integers are 64-bit)"},
  };
  for (const Bad& b : bad) {
    Result<std::string> got = render(b.source);
    ASSERT_FALSE(got.ok()) << b.source;
    EXPECT_EQ(got.status().message(), b.message) << b.source;
  }
}

// Untrusted templates: every runaway is stopped by a bound, with ResourceExhausted.
TEST(ChatTemplate, RunawayTemplatesAreBounded) {
  ChatTemplateLimits limits;
  limits.max_loop_iterations = 10'000;
  limits.max_output_bytes = 1 << 20;
  const char* runaways[] = {
      "{% for i in range(100) %}{% for j in range(100) %}{% for k in range(100) %}x{% endfor %}{% endfor %}{% endfor %}",
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "{{ 'x' * 100000000 }}",
      "{% for i in range(1000) %}{{ 'y' * 10000 }}{% endfor %}",
      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
      "{{ range(1000000000) | length }}",
      "{{ [1] * 100000000 }}",
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
      "{% set ns = namespace(head=none) %}{% for i in range(100000) %}{% set t = namespace() %}"
      "{% set t.prev = ns.head %}{% set ns.head = t %}{% endfor %}",
  };
  for (const char* source : runaways) {
    Result<std::string> got = render(source, ordered_json::object(), limits);
    ASSERT_FALSE(got.ok()) << source;
    EXPECT_EQ(got.status().code(), StatusCode::kResourceExhausted) << source << ": " << got.status().message();
  }
}

TEST(ChatTemplate, HostileTemplatesNeverCrash) {
  const std::string deep_parens = std::string(100000, '(');
  const std::string deep_ifs = [] {
    std::string s;
    for (int i = 0; i < 5000; ++i) s += "{% if true %}";
    return s;
  }();
  const std::string deep_not = [] {
    std::string s = "{{ ";
    for (int i = 0; i < 100000; ++i) s += "not ";
    return s + "x }}";
  }();
  const std::string hostile[] = {
      "{{ " + deep_parens + " }}", deep_ifs, deep_not, "{{ -" + std::string(100000, '-') + "1 }}",
      "{{", "{%", "{#", "{{ }}", "{% %}", "{% raw %}", "{{ '\\x' }}", "{{ '\\u12' }}", "{{ 99999999999999999999 }}",
      "{{ [] | first | upper }}", "{{ ''[100000000000:] }}", "{{ 'a'[::-9223372036854775807] }}",
      "{{ -9223372036854775807 - 1 }}{{ (-9223372036854775807 - 1) // -1 }}", "{{ 2 ** 64 }}",
      std::string("\xff\xfe{{ '\xc3' | upper }}\x80"), "{% set ns = namespace() %}{% set ns.x = ns %}{{ ns.x.x.x }}",
  };
  for (const std::string& source : hostile) {
    Result<ChatTemplate> t = ChatTemplate::parse(source);
    if (t.ok()) (void)t->render_variables(ordered_json::object());  // an error or a text, never a crash
  }
  EXPECT_FALSE(ChatTemplate::parse("{{ " + deep_parens + " }}").ok());
}

}  // namespace
}  // namespace rlrun::engine
