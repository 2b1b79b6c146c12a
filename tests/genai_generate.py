"""onnxruntime-genai's own greedy tokens on a model folder (run in .venv-genai): the reference the served tokens
must equal. Reads {"folder", "prompts": [[ids...]], "max_new_tokens"} on stdin, prints the new tokens per prompt."""

import json
import sys

import onnxruntime_genai as og

job = json.load(sys.stdin)
model = og.Model(job["folder"])
out = []
for ids in job["prompts"]:
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + job["max_new_tokens"], do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    while not generator.is_done():
        generator.generate_next_token()
    out.append([int(t) for t in generator.get_sequence(0)[len(ids):]])
print(json.dumps(out))
