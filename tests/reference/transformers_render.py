#!/usr/bin/env python3
"""Chat templates rendered as Python transformers renders them: Jinja2 (Debian's python3-jinja2) in the
environment transformers' chat_template_utils builds (an immutable sandbox, trim_blocks and
lstrip_blocks, the loopcontrols extension, the {% generation %} tag, tojson without HTML escaping and
with its indent/separators/sort_keys options, raise_exception and strftime_now).

The second reference of tests/cli/hf_chat_templates.sh, beside @huggingface/jinja: where the two
Hugging Face renderers disagree on a real template, Steady must give one of their answers.

Usage: transformers_render.py < REQUESTS  (one {"template": s, "context": {...}} per line)
Prints one {"text": s} or {"error": "..."} per line, as hf_reference.mjs render does.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body (the assistant-mask
    bookkeeping it also does is not part of the text)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            answer = {"text": env.from_string(request["template"]).render(**request["context"])}
        except Exception as e:  # every refusal is an answer, as in hf_reference.mjs
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(answer, ensure_ascii=False))


if __name__ == "__main__":
    main()
